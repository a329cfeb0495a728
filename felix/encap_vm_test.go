package felix_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/tests/lab"
)

// TestEncapThroughputInVM measures iperf3 (one TCP stream, 2 s) between
// two felix nodes on one veth, from an address in node-a's block to one
// in node-b's, with the pool on plain routing, IPIP Always and VXLAN
// Always in turn, and logs the ratios. Needs ipip and iperf3: tests/vm
// runs it (absolute numbers are qemu TCG's; the ratios are the point).
func TestEncapThroughputInVM(t *testing.T) {
	requireVM(t)
	a, b := vmNodes(t)

	ctx, cancel := context.WithCancel(context.Background())
	var felixes []*felix.Felix
	done := make(chan error, 2)
	for name, ns := range map[string]*nstest.NS{"node-a": a, "node-b": b} {
		f, err := felix.New(felix.Config{NodeName: name, NetNSPath: ns.Path(), ResyncInterval: time.Second,
			MTUFile: filepath.Join(t.TempDir(), "mtu"), Features: felix.Features{DisableNATOutgoing: true, DisablePolicy: true}})
		if err != nil {
			t.Fatal(err)
		}
		felixes = append(felixes, f)
		go func() { done <- f.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range felixes {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v", err)
			}
		}
	})
	affinities := []felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
	}
	for _, f := range felixes {
		f.ReplaceAffinities(affinities)
	}

	modes := []struct{ name, ipip, vxlan, dev string }{
		{"plain", "Never", "Never", "eth0"},
		{"ipip", "Always", "Never", "tunl0"},
		{"vxlan", "Never", "Always", felix.VXLANDevice},
	}
	got := map[string]float64{}
	for _, m := range modes {
		p := vxlanPool("p", "10.244.0.0/16", m.vxlan)
		p.Spec.IPIPMode = m.ipip
		na, nb := vxlanNode("node-a", "192.0.2.1/24", "10.244.1.1"), vxlanNode("node-b", "192.0.2.2/24", "10.244.2.1")
		na.Spec.BGP.IPv4IPIPTunnelAddr, nb.Spec.BGP.IPv4IPIPTunnelAddr = "10.244.1.1", "10.244.2.1"
		for _, f := range felixes {
			f.ReplaceResources(resources([]api.Resource{p, na, nb}...))
		}
		for _, w := range []struct {
			ns  *nstest.NS
			dst string
		}{{a, "10.244.2.0/26"}, {b, "10.244.1.0/26"}} {
			nstest.Eventually(t, 10*time.Second, func() string {
				l, err := w.ns.Handle.LinkByName(m.dev)
				r, ok := w.ns.Routes(t)[pfx(w.dst)]
				if err != nil || !ok || r.LinkIndex != l.Attrs().Index {
					return fmt.Sprintf("%s: %s = %v, want dev %s (%v)", m.name, w.dst, r, m.dev, err)
				}
				return ""
			})
		}
		got[m.name] = iperfInNS(t, a, b, "10.244.1.5", "10.244.2.5")
	}
	t.Logf("ENCAP-THROUGHPUT plain %.0f Mbit/s, IPIP %.0f Mbit/s (%.2f of plain), VXLAN %.0f Mbit/s (%.2f of plain)",
		got["plain"]/1e6, got["ipip"]/1e6, got["ipip"]/got["plain"], got["vxlan"]/1e6, got["vxlan"]/got["plain"])
}

// iperfInNS runs an iperf3 server in srv (one test) and a 2 s client in
// cli bound to from, and returns the bits per second received.
func iperfInNS(t *testing.T, cli, srv *nstest.NS, from, to string) float64 {
	t.Helper()
	server := exec.Command("iperf3", "-s", "-1", "-B", to)
	server.Stdout, server.Stderr = os.Stderr, os.Stderr
	srv.Do(t, server.Start) // the child is forked on the namespace's thread
	t.Cleanup(func() { _ = server.Process.Kill(); _, _ = server.Process.Wait() })
	var bps float64
	nstest.Eventually(t, 20*time.Second, func() string {
		var out []byte
		var err error
		cli.Do(t, func() error {
			out, err = exec.Command("iperf3", "-c", to, "-B", from, "-t", "2", "-J").Output()
			return nil
		})
		if err == nil {
			bps, err = lab.ParseIperf(string(out))
		}
		if err != nil {
			return fmt.Sprintf("iperf3 %s -> %s: %v", from, to, err)
		}
		return ""
	})
	return bps
}
