package policy

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestEPTableIsAMap: random puts, replacements and deletes (growing to
// thousands of keys and shrinking back to none, with the hash table
// wrapping around) leave the table answering exactly as a map does.
func TestEPTableIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab := newEPTable(maphash.MakeSeed())
	want := map[string]*endpoint{}
	check := func(step int) {
		if tab.n != len(want) {
			t.Fatalf("step %d: %d in the table, %d in the map", step, tab.n, len(want))
		}
		seen := 0
		for e := range tab.all() {
			if want[e.key] != e {
				t.Fatalf("step %d: the table yields %q (%p), the map has %p", step, e.key, e, want[e.key])
			}
			seen++
		}
		if seen != len(want) {
			t.Fatalf("step %d: yielded %d of %d", step, seen, len(want))
		}
		for k, e := range want {
			if tab.get(k) != e {
				t.Fatalf("step %d: get %q: %p, want %p", step, k, tab.get(k), e)
			}
		}
	}
	for round, size := range []int{50, 3000, 10, 5000, 0} {
		for step := range 20000 {
			k := fmt.Sprintf("ep-%d", rng.IntN(2*size+1))
			if rng.IntN(2*size+1) < size {
				e := &endpoint{key: k}
				tab.put(e)
				want[k] = e
			} else {
				tab.del(k)
				delete(want, k)
				if tab.get(k) != nil {
					t.Fatalf("round %d step %d: %q deleted but found", round, step, k)
				}
			}
			if step%997 == 0 {
				check(step)
			}
		}
		for k := range want {
			if rng.IntN(4) == 0 {
				tab.del(k)
				delete(want, k)
			}
		}
		check(-round)
	}
	for k := range want {
		tab.del(k)
	}
	if tab.n != 0 || len(tab.slots) > 16 {
		t.Errorf("emptied: %d left in %d slots", tab.n, len(tab.slots))
	}
}
