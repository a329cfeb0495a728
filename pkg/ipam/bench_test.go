package ipam

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// BenchmarkAutoAssign measures allocations per second and etcd round
// trips per allocation against a real embedded etcd with fsync on, on
// one node and on eight nodes allocating at once (one IPAM client each,
// as on separate hosts). With /26 blocks a node claims a new block every
// 64 addresses, which the per-op numbers include; in between, an
// allocation in an owned block is one transaction for a warm client.
// "cold" gives every allocation a fresh client, as every exec'd CNI ADD
// has: it first reads the node's affinities and block.
func BenchmarkAutoAssign(b *testing.B) {
	for _, nodes := range []int{1, 8} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchAssign(b, nodes, false, 4) })
	}
	b.Run("nodes=1/cold", func(b *testing.B) { benchAssign(b, 1, true, 4) })
	// IPv6 (/122 blocks of a /48) beside IPv4 in the same run.
	for _, nodes := range []int{1, 8} {
		b.Run(fmt.Sprintf("ipv6/nodes=%d", nodes), func(b *testing.B) { benchAssign(b, nodes, false, 6) })
	}
}

func newDurableEnv(t testing.TB) *env {
	t.Helper()
	srv := etcdtest.StartDurable(t)
	return &env{t: t, ds: connect(t, srv.Endpoints)}
}

func benchAssign(b *testing.B, nodes int, cold bool, family int) {
	e := newDurableEnv(b)
	if family == 6 {
		e.pool("bench", "fd00:128::/48", 122)
	} else {
		e.pool("bench", "10.128.0.0/12", 26)
	}
	clients := make([]*Client, nodes)
	for n := range clients {
		clients[n] = New(connect(b, e.ds.Endpoints()))
		e.node(fmt.Sprintf("n%d", n), nil)
		// First claim, caches.
		assign(b, clients[n], fmt.Sprintf("n%d", n), fmt.Sprintf("warm-%d", n), func(a *AssignArgs) { a.Family = family })
	}
	// used[n] is what node n's allocations cost; each goroutine owns its.
	used := make([]Stats, nodes)
	ctx := ctxT(b)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for n, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := c.Stats()
			for i := n; i < b.N; i += nodes {
				if cold {
					c, before = New(c.ds), Stats{}
				}
				if _, err := c.AutoAssign(ctx, AssignArgs{Node: fmt.Sprintf("n%d", n), HandleID: fmt.Sprintf("h%d", i), Family: family}); err != nil {
					b.Error(err)
					return
				}
				if cold {
					used[n] = addStats(used[n], c.Stats())
				}
			}
			if !cold {
				used[n] = subStats(c.Stats(), before)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var d Stats
	for _, u := range used {
		d = addStats(d, u)
	}
	ops := float64(b.N)
	b.ReportMetric(ops/elapsed.Seconds(), "allocs/s")
	b.ReportMetric(float64(d.Txns)/ops, "txns/op")
	b.ReportMetric(float64(d.Gets)/ops, "gets/op")
	b.ReportMetric(float64(d.Conflicts)/ops, "conflicts/op")
}

func addStats(a, b Stats) Stats {
	return Stats{Gets: a.Gets + b.Gets, Txns: a.Txns + b.Txns, Conflicts: a.Conflicts + b.Conflicts}
}

func subStats(a, b Stats) Stats {
	return Stats{Gets: a.Gets - b.Gets, Txns: a.Txns - b.Txns, Conflicts: a.Conflicts - b.Conflicts}
}

// BenchmarkReleaseByHandle measures a CNI DEL: freeing a handle's address
// with a warm cache (the client that allocated it).
func BenchmarkReleaseByHandle(b *testing.B) {
	e := newDurableEnv(b)
	e.pool("bench", "10.128.0.0/12", 26)
	c := New(e.ds)
	ctx := ctxT(b)
	for i := range b.N {
		assign(b, c, "n1", fmt.Sprintf("h%d", i))
	}
	before := c.Stats()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.ReleaseByHandle(ctx, fmt.Sprintf("h%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	d := c.Stats()
	b.ReportMetric(float64(d.Txns-before.Txns)/float64(b.N), "txns/op")
	b.ReportMetric(float64(d.Gets-before.Gets)/float64(b.N), "gets/op")
}
