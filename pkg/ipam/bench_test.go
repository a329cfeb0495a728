package ipam

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkAutoAssign measures allocations per second and etcd round
// trips per allocation against a real embedded etcd, on one node and on
// eight nodes allocating at once (one IPAM client each, as on separate
// hosts). With /26 blocks a node claims a new block every 64 addresses,
// which the per-op numbers include; in between, an allocation in an owned
// block is one transaction.
func BenchmarkAutoAssign(b *testing.B) {
	for _, nodes := range []int{1, 8} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchAssign(b, nodes) })
	}
}

func benchAssign(b *testing.B, nodes int) {
	e := newEnv(b)
	e.pool("bench", "10.128.0.0/12", 26)
	clients := make([]*Client, nodes)
	for n := range clients {
		clients[n] = New(connect(b, e.ds.Endpoints()))
		e.node(fmt.Sprintf("n%d", n), nil)
		assign(b, clients[n], fmt.Sprintf("n%d", n), fmt.Sprintf("warm-%d", n)) // first claim, caches
	}
	before := sumStats(clients)
	ctx := ctxT(b)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for n, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n; i < b.N; i += nodes {
				if _, err := c.AutoAssign(ctx, AssignArgs{Node: fmt.Sprintf("n%d", n), HandleID: fmt.Sprintf("h%d", i)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	d := sumStats(clients)
	ops := float64(b.N)
	b.ReportMetric(ops/elapsed.Seconds(), "allocs/s")
	b.ReportMetric(float64(d.Txns-before.Txns)/ops, "txns/op")
	b.ReportMetric(float64(d.Gets-before.Gets)/ops, "gets/op")
	b.ReportMetric(float64(d.Conflicts-before.Conflicts)/ops, "conflicts/op")
}

// BenchmarkReleaseByHandle measures a CNI DEL: freeing a handle's address
// with a warm cache (the client that allocated it).
func BenchmarkReleaseByHandle(b *testing.B) {
	e := newEnv(b)
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

func sumStats(cs []*Client) Stats {
	var s Stats
	for _, c := range cs {
		st := c.Stats()
		s.Gets += st.Gets
		s.Txns += st.Txns
		s.Conflicts += st.Conflicts
	}
	return s
}
