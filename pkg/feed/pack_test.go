package feed

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// packWEP is endpoint i's stored value, shaped as routed-cni writes one.
func packWEP(i int) (string, []byte) {
	name := fmt.Sprintf("n%d-k8s-ns--%d-pod--%d-eth0", i%50, i%7, i)
	v := fmt.Sprintf(`{"apiVersion":"routed.io/v1","kind":"WorkloadEndpoint","metadata":{"name":%q,"labels":{"app":"app-%d",`+
		`"projectcalico.org/namespace":"ns-%d","projectcalico.org/orchestrator":"k8s"}},"spec":{"node":"n%d","orchestrator":"k8s",`+
		`"namespace":"ns-%d","pod":"pod-%d","containerID":"%064x","endpoint":"eth0","interfaceName":"cali%011x",`+
		`"ipNetworks":["10.%d.%d.%d/32"],"profiles":["kns.ns-%d"]}}`,
		name, i%5, i%7, i%50, i%7, i, i*7919, i, i>>16&255, i>>8&255, i&255, i%7)
	return name, []byte(v)
}

func packWEPItem(i int) item {
	name, v := packWEP(i)
	return item{kind: api.KindWorkloadEndpoint, key: datastore.Key(api.KindWorkloadEndpoint, name), name: name, value: v, rev: int64(10 + i)}
}

// packList packs n endpoints as a list does (a deletion among them has
// no value to pack) and returns the items and the raw values by index.
func packList(n int) ([]item, map[int][]byte) {
	var items []item
	raw := map[int][]byte{}
	p := packer{out: func(its []item) { items = append(items, its...) }}
	for i := range n {
		it := packWEPItem(i)
		if i == 3 {
			it.value, it.deleted = nil, true
		} else {
			raw[i] = bytes.Clone(it.value)
		}
		p.add(it)
	}
	p.flush()
	return items, raw
}

// A list's values come back from their packs as stored, whichever
// goroutine (decoding) reads them and in whatever order, and packed
// they take a fraction of their size.
func TestPackedValuesReadBackAsStored(t *testing.T) {
	const n = 3*packValues + 17 // full packs and a last, short one
	items, raw := packList(n)
	packs := map[*pack]bool{}
	rawSize, packed := 0, 0
	for i, it := range items {
		if i == 3 {
			if it.pk != nil || it.value != nil {
				t.Fatalf("the deletion was packed: %+v", it)
			}
			continue
		}
		if it.pk == nil || it.value != nil {
			t.Fatalf("item %d not packed (pk %v, value %d bytes)", i, it.pk != nil, len(it.value))
		}
		rawSize += len(raw[i])
		if !packs[it.pk] {
			packs[it.pk] = true
			packed += len(it.pk.z)
		}
	}
	if len(packs) != 4 {
		t.Fatalf("%d packs, want 4 (%d values by %d)", len(packs), n-1, packValues)
	}
	if packed*3 > rawSize {
		t.Fatalf("packed %d bytes of %d: less than 3x", packed, rawSize)
	}
	forward, backward := newDecoding(), newDecoding()
	for i := range items {
		for _, at := range []struct {
			d *decoding
			i int
		}{{forward, i}, {backward, n - 1 - i}} {
			got, err := at.d.up.value(items[at.i])
			if err != nil {
				t.Fatalf("item %d: %v", at.i, err)
			}
			if !bytes.Equal(got, raw[at.i]) {
				t.Fatalf("item %d reads back %q, stored %q", at.i, got, raw[at.i])
			}
		}
	}
	// Decoded as a consumer does: every endpoint, the deletion as one.
	b := decodeBatch(true, 99, items, nil, nil)
	if len(b.Updates) != n {
		t.Fatalf("%d updates, want %d", len(b.Updates), n)
	}
	for i, u := range b.Updates {
		name, _ := packWEP(i)
		switch {
		case i == 3 && !u.Deleted:
			t.Fatalf("update 3 is not the deletion: %+v", u)
		case i != 3 && (u.Resource == nil || api.StoreName(u.Resource) != name):
			t.Fatalf("update %d: %+v, want endpoint %s", i, u, name)
		}
	}
}

// A pack that does not read back makes its values unreadable, reported
// as such to a consumer that asked (its deny applies), skipped for one
// that did not: never taken as absent or as something else.
func TestUnpackableValueIsUnreadable(t *testing.T) {
	items, _ := packList(packValues + 6)
	bad := items[0].pk
	bad.z = bytes.Clone(bad.z)
	for i := range bad.z[4:] { // past the frame's magic number
		bad.z[4+i] ^= 0x5a
	}
	report := map[api.Kind]bool{api.KindWorkloadEndpoint: true}
	b := decodeBatch(true, 99, append([]item(nil), items...), nil, report)
	if len(b.Updates) != len(items) {
		t.Fatalf("%d updates, want %d (the unreadable ones reported)", len(b.Updates), len(items))
	}
	for i, u := range b.Updates {
		switch {
		case i == 3:
			if !u.Deleted {
				t.Fatalf("update 3 is not the deletion: %+v", u)
			}
		case i < packValues+1: // the first pack: 64 values, the deletion among them unpacked
			if u.Resource != nil || !errors.Is(u.Unreadable, errUnpack) {
				t.Fatalf("update %d from the broken pack: resource %v, unreadable %v; want unreadable (%v)", i, u.Resource, u.Unreadable, errUnpack)
			}
		default:
			if u.Resource == nil {
				t.Fatalf("update %d from the good pack: %+v", i, u)
			}
		}
	}
	if b := decodeBatch(true, 99, append([]item(nil), items...), nil, nil); len(b.Updates) != len(items)-packValues {
		t.Fatalf("not reported: %d updates, want %d (the broken pack's skipped)", len(b.Updates), len(items)-packValues)
	}
	var enc []Encoded
	for _, it := range items {
		if !it.deleted {
			enc = append(enc, Encoded{it: it, report: true})
		}
	}
	var got, unreadable int
	DecodeEachReporting(enc, func(api.Resource) { got++ }, func(u Update) {
		if errors.Is(u.Unreadable, errUnpack) {
			unreadable++
		}
	})
	if got != 5 || unreadable != packValues {
		t.Fatalf("decoded %d and reported %d unreadable, want 5 and %d", got, unreadable, packValues)
	}
}

// What DecodeEach hands on is dropped from the slice whole (a big
// cluster's keys are not held through the decoding); what it skipped is
// left, by name, for the caller to know what gave nothing.
func TestDecodeEachDropsWhatItHandsOn(t *testing.T) {
	mk := func() []Encoded {
		var enc []Encoded
		for i := range 3 {
			enc = append(enc, Encoded{it: packWEPItem(i), report: true})
		}
		broken := packWEPItem(3)
		broken.value = []byte("{not json")
		skipped := packWEPItem(4)
		skipped.value = []byte("{not json either")
		return append(enc, Encoded{it: broken, report: true}, Encoded{it: skipped, report: false})
	}
	names := func(enc []Encoded) []string {
		var out []string
		for _, e := range enc {
			if e.Name() != "" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	name := func(i int) string { n, _ := packWEP(i); return n }

	enc := mk()
	var got, bad int
	DecodeEachReporting(enc, func(api.Resource) { got++ }, func(Update) { bad++ })
	if got != 3 || bad != 1 || fmt.Sprint(names(enc)) != fmt.Sprint([]string{name(4)}) {
		t.Fatalf("reporting: %d decoded, %d reported, left %v; want 3, 1 and [%s]", got, bad, names(enc), name(4))
	}
	enc = mk()
	got = 0
	DecodeEach(enc, func(api.Resource) { got++ })
	if got != 3 || fmt.Sprint(names(enc)) != fmt.Sprint([]string{name(3), name(4)}) {
		t.Fatalf("not reporting: %d decoded, left %v; want 3 and [%s %s]", got, names(enc), name(3), name(4))
	}
}
