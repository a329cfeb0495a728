package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// BenchmarkPodThroughputVXLAN measures iperf3 (one TCP stream, 3 s) from
// a pod on subnet a to a pod on subnet b, first over VXLAN CrossSubnet,
// then with the pool switched to plain routing (through the same router,
// which learns the blocks from BIRD), and reports both and their ratio.
// Same path, same hops: the difference is the encapsulation.
func BenchmarkPodThroughputVXLAN(b *testing.B) {
	l := startLabWith(b, func(t *lab.Topology) { t.VXLANMode = "CrossSubnet" })
	ctx := context.Background()
	n1, n3 := l.Topo.Nodes[0], l.Topo.Nodes[2]
	src, err := l.AddPod(ctx, n1.Name, "bsrc")
	if err != nil {
		b.Fatal(err)
	}
	dst, err := l.AddPod(ctx, n3.Name, "bdst")
	if err != nil {
		b.Fatal(err)
	}
	// routedVia waits until src's node routes dst's block as wanted and
	// the pods answer each other.
	routedVia := func(want string, vxlan bool) {
		testenv.Eventually(b, 30*time.Second, 200*time.Millisecond, func() string {
			routes, err := l.NodeRoutes(ctx, n1.Name)
			line := blockLine(routes, dst.IP)
			if err != nil || strings.Contains(line, "vxlan.routed") != vxlan {
				return fmt.Sprintf("%s: route to %s is %q, want %s (%v)", n1.Name, dst.IP, line, want, err)
			}
			if got, err := l.Ping(ctx, src, dst.IP, 1); err != nil || got != 1 {
				return fmt.Sprintf("%s -> %s over %s unreachable (%v)", src.Name, dst.Name, want, err)
			}
			return ""
		})
	}
	const seconds = 3
	var vx, plain float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := l.SetPoolEncap(ctx, "Never", "CrossSubnet"); err != nil {
			b.Fatal(err)
		}
		routedVia("VXLAN", true)
		if vx, err = l.Throughput(ctx, src, dst, seconds); err != nil {
			b.Fatal(err)
		}
		if err := l.SetPoolEncap(ctx, "Never", "Never"); err != nil {
			b.Fatal(err)
		}
		routedVia("plain routing", false)
		if plain, err = l.Throughput(ctx, src, dst, seconds); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(plain/1e6, "plain-Mbit/s")
	b.ReportMetric(vx/1e6, "vxlan-Mbit/s")
	b.ReportMetric(vx/plain, "vxlan/plain")
	b.Logf("pod to pod across subnets, iperf3 %d s: plain %.0f Mbit/s, VXLAN %.0f Mbit/s, VXLAN/plain %.2f", seconds, plain/1e6, vx/1e6, vx/plain)
}
