package ipam

import "sync"

// revCache remembers values by key together with the etcd ModRevision
// they were read or written at. Values are shared, so callers must treat
// them as immutable. A stale entry is harmless: every write compares the
// cached revision and refreshes the entry when it lost.
type revCache[T any] struct {
	mu  sync.Mutex
	max int
	m   map[string]revEntry[T]
}

type revEntry[T any] struct {
	val T
	rev int64
}

func newRevCache[T any](max int) *revCache[T] {
	return &revCache[T]{max: max, m: map[string]revEntry[T]{}}
}

func (r *revCache[T]) get(key string) (T, int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	return e.val, e.rev, ok
}

// put stores val at rev unless a newer revision is already cached (two
// goroutines may race to store what they read).
func (r *revCache[T]) put(key string, val T, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.m[key]; ok && e.rev > rev {
		return
	}
	if _, ok := r.m[key]; !ok && len(r.m) >= r.max {
		for k := range r.m { // evict an arbitrary entry; misses only cost a read
			delete(r.m, k)
			break
		}
	}
	r.m[key] = revEntry[T]{val: val, rev: rev}
}

func (r *revCache[T]) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
