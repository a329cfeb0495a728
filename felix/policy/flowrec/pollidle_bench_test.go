package flowrec_test

import (
	"testing"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

// BenchmarkPollIdle: the poll source's fixed cost with nothing to read,
// in the flow lab's node: each op moves the generation on and dumps
// the table twice (the closed generation, and a sweep, which runs every
// 5 s in routed), so an idle routed spends about 1.2 of an op's halves
// a second. A dump walks the kernel's whole conntrack hash under its
// bucket locks whatever the namespace holds
// (/proc/sys/net/netfilter/nf_conntrack_buckets; 262,144 here).
func BenchmarkPollIdle(b *testing.B) {
	l := newFlowLabBare(b)
	step, closeFn, err := flowrec.PollOnce(l.node.Fd)
	if err != nil {
		b.Fatal(err)
	}
	defer closeFn()
	b.ResetTimer()
	for range b.N {
		step()
	}
}
