package felix_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/natout"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

func pool(name, cidr, ipip string, nat bool) *api.IPPool {
	p := &api.IPPool{TypeMeta: api.TypeMeta{Kind: api.KindIPPool}, Metadata: api.ObjectMeta{Name: name},
		Spec: api.IPPoolSpec{CIDR: cidr, IPIPMode: ipip, NATOutgoing: nat}}
	api.SetDefaults(p)
	return p
}

func node(name, address, tunnel string) *api.Node {
	return &api.Node{TypeMeta: api.TypeMeta{Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: name},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: address, IPv4IPIPTunnelAddr: tunnel}}}
}

func wep(name, nodeName, iface string, ips ...string) *api.WorkloadEndpoint {
	return &api.WorkloadEndpoint{TypeMeta: api.TypeMeta{Kind: api.KindWorkloadEndpoint}, Metadata: api.ObjectMeta{Name: name},
		Spec: api.WorkloadEndpointSpec{Node: nodeName, InterfaceName: iface, IPNetworks: ips, ContainerID: "c-" + name}}
}

func resources(rs ...api.Resource) map[api.Kind][]api.Resource {
	out := map[api.Kind][]api.Resource{api.KindIPPool: nil, api.KindNode: nil, api.KindWorkloadEndpoint: nil}
	for _, r := range rs {
		out[r.GetKind()] = append(out[r.GetKind()], r)
	}
	return out
}

// harness is a node namespace with eth0 (192.0.2.1/24, MTU 1400) and a
// Felix running in it.
type harness struct {
	ns   *nstest.NS
	f    *felix.Felix
	cfg  felix.Config
	logs *logtest.Hook
}

func newHarness(t *testing.T, mutate func(*felix.Config)) *harness {
	n := nstest.New(t)
	eth0 := n.Veth(t, "eth0", "eth0peer")
	if err := n.Handle.LinkSetMTU(eth0, 1400); err != nil {
		t.Fatal(err)
	}
	n.AddAddr(t, "eth0", "192.0.2.1/24")
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	cfg := felix.Config{
		// These tests are about routes; felix/policy has its own (and
		// the VM's kernel has no nftables).
		Features:         felix.Features{DisablePolicy: true},
		NodeName:         "node-a",
		NetNSPath:        n.Path(),
		ResyncInterval:   time.Second,
		RouteGracePeriod: 2 * time.Second,
		MTUFile:          filepath.Join(t.TempDir(), "mtu"),
		Log:              logger.WithField("component", "felix"),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	f, err := felix.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
		if t.Failed() {
			for _, e := range hook.AllEntries() {
				t.Logf("log %s %s: %s %v", e.Time.Format("15:04:05.000"), e.Level, e.Message, e.Data)
			}
		}
	})
	return &harness{ns: n, f: f, cfg: cfg, logs: hook}
}

func (h *harness) ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", h.ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// routeIs waits until dst's route (IPv4 or IPv6) satisfies ok (nil ok:
// until it is gone).
func (h *harness) routeIs(t *testing.T, dst string, timeout time.Duration, ok func(netlink.Route) bool, what string) {
	t.Helper()
	routes := h.ns.Routes
	if pfx(dst).Addr().Is6() {
		routes = h.ns.Routes6
	}
	nstest.Eventually(t, timeout, func() string {
		r, present := routes(t)[pfx(dst)]
		switch {
		case ok == nil && present:
			return fmt.Sprintf("route %s still present: %v", dst, r)
		case ok == nil:
			return ""
		case !present:
			return fmt.Sprintf("route %s missing, want %s", dst, what)
		case int(r.Protocol) != kernel.RouteProtocol:
			return fmt.Sprintf("route %s has protocol %d", dst, r.Protocol)
		case !ok(r):
			return fmt.Sprintf("route %s = %v, want %s", dst, r, what)
		}
		return ""
	})
}

// sysctlsAre waits until each sysctl (path under /proc/sys) in the
// node's namespace holds its value.
func (h *harness) sysctlsAre(t *testing.T, want map[string]string) {
	t.Helper()
	for name, v := range want {
		nstest.Eventually(t, 3*time.Second, func() string {
			if got := strings.TrimSpace(h.ns.ReadSysctl(t, name)); got != v {
				return fmt.Sprintf("%s = %s, want %s", name, got, v)
			}
			return ""
		})
	}
}

// waitResyncs waits until felix has re-read the kernel in full n more
// times (its route_resync_seconds histogram counts them), or fails.
func (h *harness) waitResyncs(t *testing.T, reg *prometheus.Registry, n uint64) {
	t.Helper()
	count := func() uint64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "routed_felix_route_resync_seconds" && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	start := count()
	timeout := time.Duration(n+2) * h.cfg.ResyncInterval
	nstest.Eventually(t, timeout, func() string {
		if got := count() - start; got < n {
			return fmt.Sprintf("%d full resyncs, want %d", got, n)
		}
		return ""
	})
}

func (h *harness) index(t *testing.T, name string) int {
	l, err := h.ns.Handle.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

func devRoute(idx int) func(netlink.Route) bool {
	return func(r netlink.Route) bool { return r.LinkIndex == idx && r.Gw == nil && r.Scope == netlink.SCOPE_LINK }
}

func viaRoute(gw string, idx int) func(netlink.Route) bool {
	return func(r netlink.Route) bool {
		return r.Gw.String() == gw && r.LinkIndex == idx && r.Flags&unix.RTNH_F_ONLINK == 0
	}
}

func blackhole(r netlink.Route) bool { return r.Type == unix.RTN_BLACKHOLE }

func TestFelixProgramsTheNode(t *testing.T) {
	h := newHarness(t, nil)
	h.ns.Veth(t, "cali1", "pod1")
	h.ip(t, "route", "add", "198.51.100.0/24", "via", "192.0.2.9", "proto", "static")
	if h.f.Applied() {
		t.Fatal("Applied() before any snapshot: readiness would be reported too early")
	}
	reg := prometheus.NewRegistry()
	if err := h.f.Register(reg); err != nil {
		t.Fatal(err)
	}

	h.f.ReplaceResources(resources(
		pool("default", "10.244.0.0/16", "Never", true),
		pool("plain", "10.96.0.0/20", "Never", false),
		node("node-a", "192.0.2.1/24", ""),
		node("node-b", "192.0.2.2/24", ""),
		wep("a1", "node-a", "cali1", "10.244.1.5/32"),
		wep("b1", "node-b", "caliX", "10.244.2.5/32"),
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.3.0/26"), State: felix.AffinityPending},
	})
	h.f.RouteUpdate(pfx("10.50.0.0/24"), addr("192.0.2.3"), addr("192.0.2.3"), 1024) // from a ToR
	// The import guard: node-b claims a /27 inside node-a's own block.
	h.f.RouteUpdate(pfx("10.244.1.32/27"), addr("192.0.2.2"), addr("192.0.2.2"), 1024)

	eth0, cali1 := h.index(t, "eth0"), h.index(t, "cali1")
	h.routeIs(t, "10.244.1.5/32", 5*time.Second, devRoute(cali1), "dev cali1 scope link")
	h.routeIs(t, "10.244.1.0/26", time.Second, blackhole, "blackhole")
	h.routeIs(t, "10.244.2.0/26", time.Second, viaRoute("192.0.2.2", eth0), "via 192.0.2.2 dev eth0")
	h.routeIs(t, "10.50.0.0/24", time.Second, viaRoute("192.0.2.3", eth0), "via 192.0.2.3 dev eth0")
	if _, ok := h.ns.Routes(t)[pfx("10.244.3.0/26")]; ok {
		t.Error("a pending affinity was routed")
	}
	// The kernel can show the route a moment before felix's table
	// records the write: wait for it rather than sample once.
	nstest.Eventually(t, 3*time.Second, func() string {
		if !h.f.Programmed(pfx("10.50.0.0/24")) {
			return "Programmed(learned route) = false"
		}
		return ""
	})
	// Every plan refuses the /27, so once one has, it was never handed
	// to the kernel.
	nstest.Eventually(t, 3*time.Second, func() string {
		if why := h.f.Filtered(pfx("10.244.1.32/27")); !strings.HasPrefix(why, felix.FilterOwnBlock) {
			return fmt.Sprintf("Filtered(/27 inside own block) = %q, want %s", why, felix.FilterOwnBlock)
		}
		return ""
	})
	if _, ok := h.ns.Routes(t)[pfx("10.244.1.32/27")]; ok {
		t.Error("a /27 inside this node's block reached the kernel")
	}
	nstest.Eventually(t, 3*time.Second, func() string {
		if !h.f.Applied() {
			return "Applied() still false after the dataplane was programmed"
		}
		return ""
	})
	if r := h.ns.Routes(t)[pfx("198.51.100.0/24")]; r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign route touched: %v", r)
	}

	t.Run("sysctls", func(t *testing.T) {
		h.sysctlsAre(t, map[string]string{
			"net/ipv4/ip_forward":              "1",
			"net/ipv4/conf/cali1/proxy_arp":    "1",
			"net/ipv4/neigh/cali1/proxy_delay": "0",
			"net/ipv4/conf/cali1/forwarding":   "1",
		})
		// Sysctls are per namespace: someone resets one, the resync fixes it.
		h.ns.Do(t, func() error { return os.WriteFile("/proc/sys/net/ipv4/conf/cali1/proxy_arp", []byte("0"), 0) })
		nstest.Eventually(t, 4*time.Second, func() string {
			if got := strings.TrimSpace(h.ns.ReadSysctl(t, "net/ipv4/conf/cali1/proxy_arp")); got != "1" {
				return "proxy_arp was not re-applied on resync"
			}
			return ""
		})
	})

	t.Run("nat", func(t *testing.T) {
		c := nftConn(t, h)
		waitSet(t, c, natout.AllPoolsSet, pfx("10.96.0.0/20"), pfx("10.244.0.0/16"))
		waitSet(t, c, natout.NATPoolsSet, pfx("10.244.0.0/16"))
		h.f.SetResource(pool("plain", "10.96.0.0/20", "Never", true))
		waitSet(t, c, natout.NATPoolsSet, pfx("10.96.0.0/20"), pfx("10.244.0.0/16"))
		h.f.DeleteResource(api.KindIPPool, "plain")
		waitSet(t, c, natout.AllPoolsSet, pfx("10.244.0.0/16"))
		waitSet(t, c, natout.NATPoolsSet, pfx("10.244.0.0/16"))
	})

	t.Run("mtu", func(t *testing.T) {
		nstest.Eventually(t, 3*time.Second, func() string {
			got, err := felix.ReadMTUFile(h.cfg.MTUFile)
			if err != nil || got != 1400 {
				return fmt.Sprintf("MTU file = %d (%v), want 1400 (eth0's, no IPIP)", got, err)
			}
			return ""
		})
	})

	t.Run("resync", func(t *testing.T) {
		h.ip(t, "route", "del", "10.244.2.0/26")
		h.ip(t, "route", "add", "10.77.0.0/24", "via", "192.0.2.4", "proto", fmt.Sprint(kernel.RouteProtocol))
		// ResyncInterval is 1s: one resync later both are fixed.
		h.routeIs(t, "10.244.2.0/26", 2500*time.Millisecond, viaRoute("192.0.2.2", eth0), "hand-deleted route back")
		h.routeIs(t, "10.77.0.0/24", 2500*time.Millisecond, nil, "stale route gone")
	})

	t.Run("changes", func(t *testing.T) {
		h.f.RouteWithdraw(pfx("10.50.0.0/24"))
		h.routeIs(t, "10.50.0.0/24", 2*time.Second, nil, "")
		h.f.UpdateAffinity(felix.BlockAffinity{Node: "node-b", CIDR: pfx("10.244.2.0/26")}, true)
		h.routeIs(t, "10.244.2.0/26", 2*time.Second, nil, "")
		h.f.DeleteResource(api.KindWorkloadEndpoint, "a1")
		h.routeIs(t, "10.244.1.5/32", 2*time.Second, nil, "")
		h.f.UpdateAffinity(felix.BlockAffinity{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityPendingDeletion}, false)
		h.routeIs(t, "10.244.1.0/26", 2*time.Second, nil, "")
	})

	t.Run("metrics", func(t *testing.T) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		for _, want := range []string{"routed_felix_routes_programmed", "routed_felix_route_resync_seconds"} {
			if !slices.Contains(names, want) {
				t.Errorf("metric %s missing from %v", want, names)
			}
		}
	})
}

func nftConn(t *testing.T, h *harness) *nftables.Conn {
	f, err := os.Open(h.ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitSet(t *testing.T, c *nftables.Conn, name string, want ...netip.Prefix) {
	t.Helper()
	nstest.Eventually(t, 3*time.Second, func() string {
		got, err := natout.ReadSet(c, name)
		if err != nil || !slices.Equal(got, want) {
			return fmt.Sprintf("nft set %s = %v (%v), want %v", name, got, err, want)
		}
		return ""
	})
}

// TestRoutesWaitForTheirInterface shows the link watch at work: the
// resync interval is an hour, so only the watch can make the route appear.
func TestRoutesWaitForTheirInterface(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.ResyncInterval = time.Hour })
	h.f.ReplaceResources(resources(
		pool("default", "10.244.0.0/16", "Never", false),
		node("node-a", "192.0.2.1/24", ""),
		wep("a2", "node-a", "cali2", "10.244.1.9/32"),
	))
	h.f.ReplaceAffinities(nil)
	nstest.Eventually(t, 3*time.Second, func() string {
		if !h.f.Applied() {
			return "the first snapshot was never applied"
		}
		return ""
	})
	if _, ok := h.ns.Routes(t)[pfx("10.244.1.9/32")]; ok {
		t.Fatal("route appeared before its interface")
	}
	h.ns.Veth(t, "cali2", "pod2")
	h.routeIs(t, "10.244.1.9/32", 3*time.Second, devRoute(h.index(t, "cali2")), "dev cali2")
	nstest.Eventually(t, 3*time.Second, func() string {
		if got := strings.TrimSpace(h.ns.ReadSysctl(t, "net/ipv4/conf/cali2/proxy_arp")); got != "1" {
			return "new pod interface did not get proxy_arp"
		}
		return ""
	})

	// A CNI route on a brand-new interface that felix has not heard of
	// survives the grace period (2s, counted from when felix first saw
	// the interface, so never before created+2s), then goes. Watched
	// until it goes: only seeing it gone before created+2s fails (a slow
	// machine can make each look later, never earlier).
	created := time.Now()
	h.ns.Veth(t, "cali3", "pod3")
	h.ip(t, "route", "add", "10.244.1.10/32", "dev", "cali3", "scope", "link", "proto", fmt.Sprint(kernel.RouteProtocol))
	t.Logf("CNI route added %v after cali3's creation began", time.Since(created))
	h.f.RouteUpdate(pfx("10.60.0.0/24"), addr("192.0.2.5"), addr("192.0.2.5"), 1024) // forces an Apply now
	nstest.Eventually(t, 10*time.Second, func() string {
		_, present := h.ns.Routes(t)[pfx("10.244.1.10/32")]
		at := time.Since(created)
		if present {
			return fmt.Sprintf("CNI route still present %v after cali3's creation began", at)
		}
		if at < 2*time.Second {
			t.Fatalf("CNI route deleted within the grace period: gone %v after cali3's creation began", at)
		}
		return ""
	})
}

// TestWithoutKernelIPIP runs on kernels without the ipip module (this
// project's CI): felix says so once and keeps serving other pools.
func TestWithoutKernelIPIP(t *testing.T) {
	probe := nstest.New(t)
	if err := probe.Handle.LinkAdd(&netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}}); err == nil {
		t.Skip("this kernel supports IPIP; the IPIP data path is covered by tests/vm (TestIPIPInVM)")
	}
	h := newHarness(t, nil)
	h.f.ReplaceResources(resources(
		pool("ipip", "10.244.0.0/16", "Always", false),
		pool("plain", "10.245.0.0/16", "Never", false),
		node("node-a", "192.0.2.1/24", "10.244.0.1"),
		node("node-b", "192.0.2.2/24", ""),
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.245.2.0/26"), State: felix.AffinityConfirmed},
	})
	reg := prometheus.NewRegistry()
	if err := h.f.Register(reg); err != nil {
		t.Fatal(err)
	}
	h.routeIs(t, "10.245.2.0/26", 5*time.Second, viaRoute("192.0.2.2", h.index(t, "eth0")), "direct route for the non-IPIP pool")
	// Two more full resyncs (1 s apart), each of which tries tunl0 again:
	// the IPIP route must still be absent and the error not repeated.
	h.waitResyncs(t, reg, 2)
	if _, ok := h.ns.Routes(t)[pfx("10.244.2.0/26")]; ok {
		t.Error("a route for the IPIP pool was programmed without tunl0")
	}
	if h.f.Programmed(pfx("10.244.2.0/26")) {
		t.Error("IPIP route reported programmed")
	}
	if !h.f.Programmed(pfx("10.245.2.0/26")) {
		t.Error("non-IPIP route not reported programmed")
	}
	var warnings int
	for _, e := range h.logs.AllEntries() {
		if strings.Contains(e.Message, "no IPIP support") {
			warnings++
			if e.Level != logrus.ErrorLevel {
				t.Errorf("no-IPIP message logged at %s, want error", e.Level)
			}
		}
	}
	if warnings != 1 {
		t.Errorf("no-IPIP message logged %d times, want exactly once", warnings)
	}
	// Pods get the host MTU: nothing is encapsulated.
	if got, err := felix.ReadMTUFile(h.cfg.MTUFile); err != nil || got != 1400 {
		t.Errorf("MTU file = %d (%v), want 1400", got, err)
	}
}
