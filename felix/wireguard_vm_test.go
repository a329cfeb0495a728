package felix_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
)

// TestWireguardThroughputInVM runs two felix nodes with the kernel's
// WireGuard (the VM's kernel has the module) and measures iperf3 (one
// TCP stream, 2 s) from an address in node-a's block to one in node-b's:
// without encryption, through routed's wg.routed, and between the same
// two namespaces over a WireGuard device configured by hand (netlink and
// the kernel's configuration interface, as `ip` and `wg` do), the two
// encrypted ones in turn. It logs the ratios (qemu TCG's absolute
// numbers mean little). tests/vm runs it.
func TestWireguardThroughputInVM(t *testing.T) {
	requireVM(t)
	a, b := vmNodes(t)

	felixes := vmFelixes(t, a, b, felix.WireguardConfig{})
	routeDev := func(ns *nstest.NS, dst, dev string) {
		t.Helper()
		nstest.Eventually(t, 20*time.Second, func() string {
			l, err := ns.Handle.LinkByName(dev)
			r, ok := ns.Routes(t)[pfx(dst)]
			if err != nil || !ok || r.LinkIndex != l.Attrs().Index {
				return "route " + dst + " not on " + dev
			}
			return ""
		})
	}
	got := map[string]float64{}
	routeDev(a, "10.244.2.0/26", "eth0")
	got["plain"] = iperfInNS(t, a, b, "10.244.1.5", "10.244.2.5")

	for _, f := range felixes {
		f.SetWireguard(true, false)
	}
	routeDev(a, "10.244.2.0/26", wireguard.DeviceV4)
	routeDev(b, "10.244.1.0/26", wireguard.DeviceV4)
	st, err := felixes[0].Wireguard(context.Background())
	if err != nil || len(st.Devices) != 1 || st.Devices[0].Implementation != "kernel" {
		t.Fatalf("want the kernel's device: %+v %v", st, err)
	}
	// Both devices side by side (ports 51820 and 51999), measured in
	// turn three times: TCG's crypto is slow and noisy, the best of each
	// is compared.
	handWireguard(t, a, b)
	for i := 0; i < 3; i++ {
		got["routed"] = max(got["routed"], iperfInNS(t, a, b, "10.244.1.5", "10.244.2.5"))
		got["hand"] = max(got["hand"], iperfInNS(t, a, b, "10.99.0.1", "10.99.0.2"))
	}
	st, _ = felixes[0].Wireguard(context.Background())
	if len(st.Devices[0].Peers) != 1 || st.Devices[0].Peers[0].TxBytes < 1<<20 {
		t.Errorf("the iperf3 streams did not go through wg.routed: %+v", st.Devices[0].Peers)
	}
	t.Logf("WIREGUARD-THROUGHPUT (best of 3, 2 s each) plain %.0f Mbit/s, routed's wg.routed %.0f Mbit/s (%.2f of plain), hand-configured WireGuard %.0f Mbit/s (%.2f of plain); routed/hand %.2f",
		got["plain"]/1e6, got["routed"]/1e6, got["routed"]/got["plain"], got["hand"]/1e6, got["hand"]/got["plain"], got["routed"]/got["hand"])
}

// vmFelixes runs a felix with the kernel's WireGuard (wg as given, mode
// and keys added) on each of vmNodes' namespaces, relaying each
// published key to both as the Node records would, until the test ends.
func vmFelixes(t *testing.T, a, b *nstest.NS, wg felix.WireguardConfig) []*felix.Felix {
	t.Helper()
	nodes := map[string]*api.Node{"node-a": node("node-a", "192.0.2.1/24", ""), "node-b": node("node-b", "192.0.2.2/24", "")}
	keys := make(chan [2]string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var felixes []*felix.Felix
	done := make(chan error, 2)
	for _, n := range []struct {
		name string
		ns   *nstest.NS
	}{{"node-a", a}, {"node-b", b}} {
		f, err := felix.New(felix.Config{NodeName: n.name, NetNSPath: n.ns.Path(), ResyncInterval: time.Second,
			MTUFile: filepath.Join(t.TempDir(), "mtu"), Features: felix.Features{DisableNATOutgoing: true, DisablePolicy: true},
			WireGuard: withKernelKeys(wg, t.TempDir(), func(v4 string) { keys <- [2]string{n.name, v4} })})
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
	feed := func() {
		for _, f := range felixes {
			f.ReplaceResources(resources(pool("p", "10.244.0.0/16", "Never", false), nodes["node-a"], nodes["node-b"]))
		}
	}
	// The Node records: each published key reaches both felixes.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case k := <-keys:
				n := *nodes[k[0]]
				n.Status.WireguardPublicKey = k[1]
				for _, f := range felixes {
					f.SetResource(&n)
				}
			}
		}
	}()
	feed()
	for _, f := range felixes {
		f.ReplaceAffinities([]felix.BlockAffinity{
			{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
			{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
		})
	}
	return felixes
}

func withKernelKeys(wg felix.WireguardConfig, dir string, publish func(v4 string)) felix.WireguardConfig {
	wg.Mode, wg.KeyDir = wireguard.ModeKernel, dir
	wg.PublishKeys = func(v4, _ string) { publish(v4) }
	return wg
}

// handWireguard joins a and b with a kernel WireGuard device wgh0 made
// by hand (10.99.0.1 <-> 10.99.0.2 over the uplink, port 51999).
func handWireguard(t *testing.T, a, b *nstest.NS) {
	t.Helper()
	type side struct {
		ns    *nstest.NS
		addr  string
		uplnk string
		key   wgtypes.Key
	}
	ka, _ := wgtypes.GeneratePrivateKey()
	kb, _ := wgtypes.GeneratePrivateKey()
	sides := []side{{a, "10.99.0.1", "192.0.2.1", ka}, {b, "10.99.0.2", "192.0.2.2", kb}}
	for i, s := range sides {
		peer := sides[1-i]
		la := netlink.NewLinkAttrs()
		la.Name = "wgh0"
		if err := s.ns.Handle.LinkAdd(&netlink.Wireguard{LinkAttrs: la}); err != nil {
			t.Fatal(err)
		}
		port := 51999
		s.ns.Do(t, func() error {
			c, err := wgctrl.New()
			if err != nil {
				return err
			}
			defer c.Close()
			return c.ConfigureDevice("wgh0", wgtypes.Config{PrivateKey: &s.key, ListenPort: &port, Peers: []wgtypes.PeerConfig{{
				PublicKey: peer.key.PublicKey(), Endpoint: net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(peer.uplnk), 51999)),
				AllowedIPs: []net.IPNet{{IP: net.ParseIP(peer.addr).To4(), Mask: net.CIDRMask(32, 32)}},
			}}})
		})
		s.ns.AddAddr(t, "wgh0", s.addr+"/32")
		l, err := s.ns.Handle.LinkByName("wgh0")
		if err != nil || s.ns.Handle.LinkSetMTU(l, 1440) != nil || s.ns.Handle.LinkSetUp(l) != nil {
			t.Fatalf("wgh0 up: %v", err)
		}
		if err := s.ns.Handle.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP(peer.addr).To4(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// vmNodes is two node namespaces joined by one veth (eth0: 192.0.2.1/24
// and 192.0.2.2/24) with a "pod" address on lo in each node's block
// (10.244.1.5 and 10.244.2.5), made with netlink only: the VM's busybox
// ip has no netns verb.
func vmNodes(t *testing.T) (a, b *nstest.NS) {
	t.Helper()
	a, b = nstest.New(t), nstest.New(t)
	a.Veth(t, "eth0", "ethb")
	ethb, err := a.Handle.LinkByName("ethb")
	if err != nil {
		t.Fatal(err)
	}
	bh, err := netns.GetFromPath(b.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	if err := a.Handle.LinkSetNsFd(ethb, int(bh)); err != nil {
		t.Fatal(err)
	}
	if l, err := b.Handle.LinkByName("ethb"); err != nil || b.Handle.LinkSetName(l, "eth0") != nil || b.Handle.LinkSetUp(l) != nil {
		t.Fatalf("moving the veth end to node-b: %v", err)
	}
	a.AddAddr(t, "eth0", "192.0.2.1/24")
	b.AddAddr(t, "eth0", "192.0.2.2/24")
	a.AddAddr(t, "lo", "10.244.1.5/32") // a "pod" address in node-a's block
	b.AddAddr(t, "lo", "10.244.2.5/32")
	return a, b
}
