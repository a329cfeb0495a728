package ipam

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// BenchmarkLayoutMove times the move of a datastore written before
// layout 2 (ensureLayout, as the first routed of an upgraded cluster
// runs it) against etcd with fsync on: 1,000 /26 blocks, 30 pods each,
// as at 30,000 pods (150,000 pods have about 5,000 blocks: five times
// this). It reports the move's seconds and blocks a second; what is
// timed is the whole move, one per iteration, of a freshly written old
// layout.
func BenchmarkLayoutMove(b *testing.B) {
	const blocks, pods = 1000, 30
	srv := etcdtest.StartDurable(b)
	e := &env{t: b, ds: connect(b, srv.Endpoints)}
	e.pool("p", "10.128.0.0/16", 26)
	var ibs []ImportBlock
	for i := range blocks {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 128, byte(i / 4), byte(i % 4 * 64)}), 26)
		ib := ImportBlock{CIDR: p, Node: fmt.Sprintf("node-%d", i)}
		for o := range pods {
			ib.Allocations = append(ib.Allocations, ImportAllocation{Ordinal: o, Handle: fmt.Sprintf("k8s-pod-network.%d-%d", i, o),
				Namespace: "ns", Pod: fmt.Sprintf("pod-%d-%d", i, o), Node: ib.Node, Type: TypePod})
		}
		ibs = append(ibs, ib)
	}
	ctx := ctxT(b)
	for len(ibs) > 0 {
		n := min(len(ibs), 50)
		if _, err := New(e.ds).Import(ctx, ibs[:n], false); err != nil {
			b.Fatal(err)
		}
		ibs = ibs[n:]
	}
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		toOldLayout(b, e)
		c := New(e.ds)
		b.StartTimer()
		t0 := time.Now()
		if err := c.ensureLayout(ctx); err != nil {
			b.Fatal(err)
		}
		took += time.Since(t0)
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s/move")
	b.ReportMetric(float64(blocks*b.N)/took.Seconds(), "blocks/s")
}
