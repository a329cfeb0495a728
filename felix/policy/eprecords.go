package policy

import (
	"strings"
	"unsafe"
)

// epRecords makes the workload endpoints' records (a big cluster has one
// per pod on every node: 150,000) in blocks rather than one by one: the
// endpoint structs in chunks, their keys' bytes in pointer-free chunks.
// Made one by one during the start-up snapshot, each record and its key
// (decoded from JSON) was a 64-byte object among the garbage the
// snapshot's decoding leaves in the same spans, so every span kept a few
// and the heap could not give their pages back (about 2.5 times the
// records' own size stayed in use after the start-up). Host endpoints,
// a handful, are not made here. The zero value is ready.
//
// Invariants:
//   - An endpoint struct goes back to the free list only once nothing
//     refers to it: SetEndpoint and DeleteEndpoint release it last,
//     after taking it out of the table, the address index, its group
//     and the locals. A released struct is cleared and made again.
//   - Key bytes are never written twice: a key stays valid wherever
//     it was copied (maps, index entries, callers). Keys of endpoints
//     gone are dead bytes; once they outweigh the live ones the live
//     keys are copied into fresh chunks (compact), and the old chunks
//     go once nothing else refers to them.
type epRecords struct {
	chunk []endpoint // the current chunk's unused tail
	free  []*endpoint

	keyChunk []byte // the current key chunk: len is its used part
	keyUsed  int    // bytes taken from key chunks since the last compaction
	keyLive  int    // of those, bytes of keys in use

	chunks, compactions int // made so far (tests)
}

const (
	// epChunk is how many endpoint structs one chunk holds (9 KiB).
	epChunk = 144
	// keyChunkSize is a key chunk's size; a key longer than a quarter
	// of it gets its own copy.
	keyChunkSize = 32 << 10
	// keyCompactMin is the dead key bytes below which nothing is
	// compacted, however few keys live.
	keyCompactMin = 256 << 10
)

// newEndpoint returns a cleared endpoint struct.
func (r *epRecords) newEndpoint() *endpoint {
	if n := len(r.free); n > 0 {
		e := r.free[n-1]
		r.free[n-1] = nil
		r.free = r.free[:n-1]
		return e
	}
	if len(r.chunk) == 0 {
		r.chunk = make([]endpoint, epChunk)
		r.chunks++
	}
	e := &r.chunk[0]
	r.chunk = r.chunk[1:]
	return e
}

// release takes back e, which nothing refers to any more.
func (r *epRecords) release(e *endpoint) {
	*e = endpoint{}
	r.free = append(r.free, e)
}

// key returns a copy of k in a key chunk, counted as live.
func (r *epRecords) key(k string) string {
	r.keyLive += len(k)
	return r.copyKey(k)
}

func (r *epRecords) copyKey(k string) string {
	if k == "" {
		return ""
	}
	if len(k) > keyChunkSize/4 {
		r.keyUsed += len(k)
		return strings.Clone(k)
	}
	if cap(r.keyChunk)-len(r.keyChunk) < len(k) {
		r.keyChunk = make([]byte, 0, keyChunkSize)
	}
	n := len(r.keyChunk)
	r.keyChunk = append(r.keyChunk, k...)
	r.keyUsed += len(k)
	// The bytes are never written again (see the invariants).
	return unsafe.String(&r.keyChunk[n], len(k))
}

// dropKey counts k, a key from key, as dead.
func (r *epRecords) dropKey(k string) { r.keyLive -= len(k) }

// needsCompact reports whether the dead key bytes outweigh the live.
func (r *epRecords) needsCompact() bool {
	dead := r.keyUsed - r.keyLive
	return dead > keyCompactMin && dead > r.keyLive
}

// compactKeys copies the live keys of t's endpoints into fresh chunks.
func (r *epRecords) compactKeys(t *epTable) {
	r.keyChunk, r.keyUsed = nil, 0
	r.compactions++
	for e := range t.all() {
		e.key = r.copyKey(e.key)
	}
}

// makeEndpoint returns the record of an endpoint keyed key in group g,
// replacing old (nil: none): a workload's from c.recs, keeping old's copy
// of the key; a host endpoint's on its own.
func (c *Calc) makeEndpoint(key string, g *group, old *endpoint) *endpoint {
	if g.host {
		if old != nil {
			key = old.key // one copy of it
		}
		return &endpoint{key: key, g: g}
	}
	if old != nil && !old.g.host {
		key = old.key
	} else {
		key = c.recs.key(key)
	}
	e := c.recs.newEndpoint()
	e.key, e.g = key, g
	return e
}

// releaseEndpoint takes back old, replaced by now (nil: deleted), once
// nothing refers to it any more; a workload's key that no record keeps
// is counted dead, and the keys are compacted when the dead outweigh
// the live.
func (c *Calc) releaseEndpoint(old, now *endpoint) {
	if old.g.host {
		return
	}
	if now == nil || now.g.host {
		c.recs.dropKey(old.key)
	}
	c.recs.release(old)
	if c.recs.needsCompact() {
		c.recs.compactKeys(c.weps)
	}
}
