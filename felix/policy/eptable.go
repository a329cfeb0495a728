package policy

import (
	"hash/maphash"
	"iter"
)

// epTable holds the workload endpoints by key: a hash table of
// pointers (open addressing, linear probing), since a map of a big
// cluster's endpoints costs three times as much per endpoint (its key's
// string header besides the pointer, and more room). The key is the
// endpoint's own (endpoint.key).
type epTable struct {
	seed  maphash.Seed
	slots []*endpoint // empty or a power of two long
	n     int
}

func newEPTable(seed maphash.Seed) *epTable { return &epTable{seed: seed} }

func (t *epTable) home(key string) int {
	return int(maphash.String(t.seed, key) & uint64(len(t.slots)-1))
}

func (t *epTable) next(i int) int { return (i + 1) & (len(t.slots) - 1) }

// find is the slot holding key, or the empty slot where it would go
// (-1 when the table has no slots).
func (t *epTable) find(key string) int {
	if len(t.slots) == 0 {
		return -1
	}
	i := t.home(key)
	for t.slots[i] != nil && t.slots[i].key != key {
		i = t.next(i)
	}
	return i
}

// get returns the endpoint with key, nil if none.
func (t *epTable) get(key string) *endpoint {
	if i := t.find(key); i >= 0 {
		return t.slots[i]
	}
	return nil
}

// put adds e, replacing the endpoint with its key.
func (t *epTable) put(e *endpoint) {
	if (t.n+1)*8 > len(t.slots)*7 {
		t.resize(max(16, 2*len(t.slots)))
	}
	i := t.find(e.key)
	if t.slots[i] == nil {
		t.n++
	}
	t.slots[i] = e
}

// del removes the endpoint with key, if any.
func (t *epTable) del(key string) {
	i := t.find(key)
	if i < 0 || t.slots[i] == nil {
		return
	}
	// Move back the entries after it that would no longer be found
	// across the hole (their home is not between the hole and them).
	for j := t.next(i); t.slots[j] != nil; j = t.next(j) {
		h := t.home(t.slots[j].key)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.slots[i], i = t.slots[j], j
		}
	}
	t.slots[i] = nil
	t.n--
	if len(t.slots) > 16 && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

func (t *epTable) resize(size int) {
	old := t.slots
	t.slots = make([]*endpoint, size)
	for _, e := range old {
		if e != nil {
			i := t.home(e.key)
			for t.slots[i] != nil {
				i = t.next(i)
			}
			t.slots[i] = e
		}
	}
}

// all yields every endpoint, in no order. The table must not change
// meanwhile.
func (t *epTable) all() iter.Seq[*endpoint] {
	return func(yield func(*endpoint) bool) {
		for _, e := range t.slots {
			if e != nil && !yield(e) {
				return
			}
		}
	}
}

// endpoint returns the workload or host endpoint key, nil if none.
func (c *Calc) endpoint(key string) *endpoint {
	if e := c.weps.get(key); e != nil {
		return e
	}
	return c.eps[key]
}

// allEndpoints yields every endpoint, workloads and host endpoints.
func (c *Calc) allEndpoints() iter.Seq[*endpoint] {
	return func(yield func(*endpoint) bool) {
		for e := range c.weps.all() {
			if !yield(e) {
				return
			}
		}
		for _, e := range c.eps {
			if !yield(e) {
				return
			}
		}
	}
}

// storeEndpoint keeps e as the endpoint of its key: a host endpoint in
// c.eps, a workload's in c.weps (and the key's in neither other).
func (c *Calc) storeEndpoint(e *endpoint) {
	if e.g.host {
		c.weps.del(e.key)
		c.eps[e.key] = e
		return
	}
	delete(c.eps, e.key)
	c.weps.put(e)
}

// dropEndpoint forgets the endpoint of key.
func (c *Calc) dropEndpoint(key string) {
	c.weps.del(key)
	delete(c.eps, key)
}
