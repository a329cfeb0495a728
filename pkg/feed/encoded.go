package feed

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"runtime"
)

// Encoded is an object of a snapshot handed over as stored, not decoded
// (the kinds a subscription takes undecoded, see Undecoded): a consumer
// that keeps a little of each of a big cluster's objects decodes them
// a chunk at a time (DecodeEach) and drops each decoded object before
// the next chunk. Decoded all at once, a snapshot of 150,000 endpoints
// is live while the consumer makes what it keeps, which then sits in
// the snapshot's pages, a few small objects to a page, once the
// snapshot is gone (issue 36: felix's heap in use 120 MiB for 74 MiB
// live, against 86 MiB decoded a chunk at a time).
type Encoded struct {
	it item
	// report: its kind is reported when unreadable (ReportUnreadable),
	// so a value whose content names another object is unreadable too.
	report bool
}

// NewEncoded is a stored object of kind k named name: its value as
// stored and its revision, of a kind reported when unreadable.
func NewEncoded(k api.Kind, name string, value []byte, rev int64) Encoded {
	return Encoded{it: item{kind: k, key: datastore.Key(k, name), name: name, value: value, rev: rev}, report: true}
}

// Kind is the object's kind.
func (e Encoded) Kind() api.Kind { return e.it.kind }

// Name is the object's resource name (known without decoding).
func (e Encoded) Name() string { return e.it.name }

// Undecoded hands the objects of kinds in snapshots to the consumer
// undecoded, in Batch.Encoded (its changes stay decoded: they are few).
// The consumer must take them: feed.Dispatch's resource handler as an
// EncodedHandler, or by DecodeEach.
// Only resource kinds can be: affinities and borrowed addresses decode
// to no resource.
func Undecoded(kinds ...api.Kind) SubOption {
	for _, k := range kinds {
		if k == KindAffinity || k == KindBorrowed {
			panic("feed.Undecoded: " + string(k) + " is not a resource kind")
		}
	}
	return func(s *sub) {
		for _, k := range kinds {
			s.undecoded[k] = true
		}
	}
}

// decodeChunk is how many objects DecodeEach decodes before handing
// them on: small against a big cluster's snapshot, big enough to spread
// over every CPU.
const decodeChunk = 1024

// decodeSpreadMin is the chunk from which decoding is spread over every
// CPU (a goroutine each costs more than a few objects' decoding).
const decodeSpreadMin = 64

// DecodeEach decodes es in order, a chunk at a time (each chunk over
// every CPU), and calls fn with each object on the caller's goroutine.
// An unreadable value is logged and skipped, as in a decoded batch.
// Each value is dropped from es once decoded, and each object handed on
// is dropped whole (es[i] becomes the zero Encoded, its Name empty): a
// big cluster's keys are not held until the last is decoded. What is
// left in es are the objects skipped, by name.
func DecodeEach(es []Encoded, fn func(api.Resource)) { DecodeEachReporting(es, fn, nil) }

// DecodeEachReporting is DecodeEach that hands bad, in order among fn's
// calls, the objects of reported kinds (ReportUnreadable) that are
// unreadable: their value does not decode, or its content names another
// object. Each is an update with Unreadable and Value set, as a batch
// reports one. With bad nil they are skipped.
func DecodeEachReporting(es []Encoded, fn func(api.Resource), bad func(Update)) {
	out := make([]Update, min(decodeChunk, len(es)))
	// Each worker keeps its decoding from chunk to chunk: the strings
	// it shared and the pack it unpacked last carry over.
	decs := make([]*decoding, runtime.GOMAXPROCS(0))
	for lo := 0; lo < len(es); lo += decodeChunk {
		part := es[lo:min(lo+decodeChunk, len(es))]
		decode := func(w, lo, hi int) {
			if decs[w] == nil {
				decs[w] = newDecoding()
			}
			d := decs[w]
			for i := lo; i < hi; i++ {
				out[i] = decodeEncoded(part[i], d)
				part[i].it.value, part[i].it.pk = nil, nil
			}
		}
		if len(part) >= decodeSpreadMin {
			spread(len(part), decode)
		} else {
			decode(0, 0, len(part))
		}
		for i := range part {
			switch u := out[i]; {
			case u.Resource != nil:
				fn(u.Resource)
				part[i] = Encoded{}
			case u.Unreadable != nil && bad != nil:
				bad(u)
				part[i] = Encoded{}
			}
			out[i] = Update{}
		}
	}
}

// decodeEncoded decodes one object; its Update has Resource set, or,
// unreadable and of a reported kind, Unreadable and Value; or neither
// (skipped).
func decodeEncoded(e Encoded, d *decoding) Update {
	u, ok := decodeItem(e.it, d)
	if !e.report {
		if !ok {
			return Update{}
		}
		return u
	}
	if ok && u.Resource != nil {
		if err := datastore.CheckName(u.Kind, u.Name, u.Resource, u.Revision); err != nil {
			log.WithError(err).WithField("key", e.it.key).Warn("unreadable record")
			u.Resource, u.Unreadable, u.Value = nil, err, d.kept(e.it)
		}
	}
	return u
}

// takeUndecoded moves a snapshot's present objects of the undecoded
// kinds out of items, in order, and returns the rest (items' array,
// compacted) and them.
func takeUndecoded(items []item, undecoded, report map[api.Kind]bool) ([]item, []Encoded) {
	if len(undecoded) == 0 {
		return items, nil
	}
	m := 0
	for _, it := range items {
		if undecoded[it.kind] && !it.deleted {
			m++
		}
	}
	if m == 0 {
		return items, nil
	}
	enc := make([]Encoded, 0, m)
	n := 0
	for _, it := range items {
		if undecoded[it.kind] && !it.deleted {
			enc = append(enc, Encoded{it: it, report: report[it.kind]})
			continue
		}
		items[n] = it
		n++
	}
	clear(items[n:])
	return items[:n], enc
}
