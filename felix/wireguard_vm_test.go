package felix_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
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
	l := newVMLab(t, a, b, wg)
	return []*felix.Felix{l.nodes[0].f, l.nodes[1].f}
}

// vmLab is vmFelixes' two nodes, each of which can be stopped and
// started again (a restart, or a reboot when its device is deleted in
// between) on its own key directory.
type vmLab struct {
	t     *testing.T
	wg    felix.WireguardConfig
	keys  chan [2]string
	mu    sync.Mutex
	recs  map[string]*api.Node // the Node records, with published keys
	nodes []*vmNode
}

type vmNode struct {
	name, keyDir, mtuFile string
	ns                    *nstest.NS
	f                     *felix.Felix // nil while stopped
	cancel                context.CancelFunc
	done                  chan error
}

func newVMLab(t *testing.T, a, b *nstest.NS, wg felix.WireguardConfig) *vmLab {
	t.Helper()
	l := &vmLab{t: t, wg: wg, keys: make(chan [2]string, 16),
		recs: map[string]*api.Node{"node-a": node("node-a", "192.0.2.1/24", ""), "node-b": node("node-b", "192.0.2.2/24", "")}}
	for _, n := range []struct {
		name string
		ns   *nstest.NS
	}{{"node-a", a}, {"node-b", b}} {
		l.nodes = append(l.nodes, &vmNode{name: n.name, ns: n.ns, keyDir: t.TempDir(), mtuFile: filepath.Join(t.TempDir(), "mtu")})
	}
	ctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan struct{})
	// The Node records: each published key reaches both felixes (not
	// from felix's own loop, which publishes).
	go func() {
		defer close(relayed)
		for {
			select {
			case <-ctx.Done():
				return
			case k := <-l.keys:
				l.mu.Lock()
				n := *l.recs[k[0]]
				n.Status.WireguardPublicKey = k[1]
				l.recs[k[0]] = &n
				for _, vn := range l.nodes {
					if vn.f != nil {
						vn.f.SetResource(&n)
					}
				}
				l.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		for _, n := range l.nodes {
			if n.f != nil {
				l.stop(n)
			}
		}
		cancel()
		<-relayed
	})
	for _, n := range l.nodes {
		l.start(n)
	}
	return l
}

// start runs n's felix (again) on its namespace and key directory, fed
// the pool, the Node records as published so far and the blocks.
func (l *vmLab) start(n *vmNode) {
	l.t.Helper()
	f, err := felix.New(felix.Config{NodeName: n.name, NetNSPath: n.ns.Path(), ResyncInterval: time.Second,
		MTUFile: n.mtuFile, Features: felix.Features{DisableNATOutgoing: true, DisablePolicy: true},
		WireGuard: withKernelKeys(l.wg, n.keyDir, func(v4 string) { l.keys <- [2]string{n.name, v4} })})
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- f.Run(ctx) }()
	l.mu.Lock()
	n.f = f
	f.ReplaceResources(resources(pool("p", "10.244.0.0/16", "Never", false), l.recs["node-a"], l.recs["node-b"]))
	l.mu.Unlock()
	f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
	})
}

// stop ends n's felix as routed's exit does: the kernel device stays.
func (l *vmLab) stop(n *vmNode) {
	l.t.Helper()
	n.cancel()
	if err := <-n.done; !errors.Is(err, context.Canceled) {
		l.t.Errorf("%s: Run returned %v", n.name, err)
	}
	if err := n.f.CloseWireguard(); err != nil {
		l.t.Errorf("%s: CloseWireguard: %v", n.name, err)
	}
	l.mu.Lock()
	n.f = nil
	l.mu.Unlock()
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
