package routetable_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/routetable"
)

// benchRoutes makes n /32 routes in 10.0.0.0/8 via 192.0.2.2 on eth0.
func benchRoutes(n int) map[netip.Prefix]routetable.Route {
	m := make(map[netip.Prefix]routetable.Route, n)
	gw := netip.MustParseAddr("192.0.2.2")
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		p := netip.PrefixFrom(a, 32)
		m[p] = routetable.Route{Dst: p, Iface: "eth0", Gw: gw}
	}
	return m
}

func benchNS(b *testing.B) *nstest.NS {
	n := nstest.New(b)
	n.Veth(b, "eth0", "eth0peer")
	n.AddAddr(b, "eth0", "192.0.2.1/24")
	return n
}

// BenchmarkProgram programs 10k and 50k routes with the route table and,
// in the same run, with `ip -batch` (each in a fresh netns), and times a
// no-op resync (re-read everything, write nothing). Metrics:
// felix-ms, ip-batch-ms, felix/ip-batch (ratio), noop-resync-ms, and
// netlink-handle-ms (per-route RouteReplace on a reused handle, the
// approach the batching writer replaces).
func BenchmarkProgram(b *testing.B) {
	nstest.RequireRoot(b)
	if _, err := exec.LookPath("ip"); err != nil {
		b.Skip("!!! SKIPPED: the comparison needs iproute2's ip !!!")
	}
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			routes := benchRoutes(n)
			var sb strings.Builder
			for p := range routes {
				fmt.Fprintf(&sb, "route add %s via 192.0.2.2 dev eth0 proto %d\n", p, proto)
			}
			batch := filepath.Join(b.TempDir(), "routes.batch")
			if err := os.WriteFile(batch, []byte(sb.String()), 0o644); err != nil {
				b.Fatal(err)
			}
			var felixT, ipT, handleT, resyncT time.Duration
			iters := 0
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				ns1 := benchNS(b)
				h, err := netns.GetFromPath(ns1.Path())
				if err != nil {
					b.Fatal(err)
				}
				k, err := routetable.NewNetlinkKernel(h)
				h.Close()
				if err != nil {
					b.Fatal(err)
				}
				rt := routetable.New(routetable.Config{Protocol: proto}, k)
				b.StartTimer()

				start := time.Now()
				if err := rt.SetRoutes(routes); err != nil {
					b.Fatal(err)
				}
				if err := rt.Apply(); err != nil {
					b.Fatal(err)
				}
				felixT += time.Since(start)

				start = time.Now()
				rt.Resync()
				if err := rt.Apply(); err != nil {
					b.Fatal(err)
				}
				resyncT += time.Since(start)
				if got := rt.NumProgrammed(); got != n {
					b.Fatalf("programmed %d routes, want %d", got, n)
				}
				k.Close()

				b.StopTimer()
				ns2 := benchNS(b)
				b.StartTimer()
				start = time.Now()
				if out, err := exec.Command("ip", "-n", ns2.Name, "-batch", batch).CombinedOutput(); err != nil {
					b.Fatalf("ip -batch: %v: %s", err, out)
				}
				ipT += time.Since(start)

				// For reference: one reused vishvananda/netlink handle,
				// one request and ack round trip per route.
				b.StopTimer()
				ns3 := benchNS(b)
				eth0, err := ns3.Handle.LinkByName("eth0")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start = time.Now()
				for p := range routes {
					r := &netlink.Route{Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)},
						Gw: net.IPv4(192, 0, 2, 2), LinkIndex: eth0.Attrs().Index, Protocol: proto}
					if err := ns3.Handle.RouteReplace(r); err != nil {
						b.Fatal(err)
					}
				}
				handleT += time.Since(start)
				iters++
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(iters) }
			b.ReportMetric(ms(felixT), "felix-ms")
			b.ReportMetric(ms(ipT), "ip-batch-ms")
			b.ReportMetric(float64(felixT)/float64(ipT), "felix/ip-batch")
			b.ReportMetric(ms(resyncT), "noop-resync-ms")
			b.ReportMetric(ms(handleT), "netlink-handle-ms")
		})
	}
}

// BenchmarkLinkRoutes times the per-device dump used when a new pod
// device's grace period ends, with 50k other routes in the table.
func BenchmarkLinkRoutes(b *testing.B) {
	n := benchNS(b)
	n.Veth(b, "cali1", "pod1")
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		b.Fatal(err)
	}
	k, err := routetable.NewNetlinkKernel(h)
	h.Close()
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	rt := routetable.New(routetable.Config{Protocol: proto}, k)
	routes := benchRoutes(50000)
	p := netip.MustParsePrefix("10.200.0.1/32")
	routes[p] = routetable.Route{Dst: p, Iface: "cali1"}
	if err := rt.SetRoutes(routes); err != nil {
		b.Fatal(err)
	}
	if err := rt.Apply(); err != nil {
		b.Fatal(err)
	}
	l, _ := n.Handle.LinkByName("cali1")
	b.ResetTimer()
	for b.Loop() {
		count := 0
		// The kernel's own routes on the device (IPv6 link-local, once
		// the link is up) come and go on their own: count routed's.
		if err := k.LinkRoutes(254, l.Attrs().Index, func(r routetable.KernelRoute) {
			if r.Protocol == proto {
				count++
			}
		}); err != nil {
			b.Fatal(err)
		}
		if count != 1 {
			b.Fatalf("got %d routes of protocol %d on cali1, want 1", count, proto)
		}
	}
}
