// Package nstest gives privileged tests a fresh, uniquely named network
// namespace with a netlink handle in it, and helpers to build interfaces
// without the dummy module (which this project's kernels may lack).
//
// Every namespace is removed in t.Cleanup; nothing here touches the
// namespace the test process runs in.
package nstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/internal/testenv"
)

// NS is a test network namespace.
type NS struct {
	// NetNS is the namespace; Path() is its bind mount under /var/run/netns.
	ns.NetNS
	// Handle is a netlink handle inside the namespace.
	Handle *netlink.Handle
	// Name is the file name under /var/run/netns (usable with `ip -n`).
	Name string
}

// RequireRoot stops the test when not running as root: a failure under
// CI (which runs as root), a loud skip elsewhere.
func RequireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
}

// New creates a fresh namespace with loopback up, removed at cleanup.
func New(t testing.TB) *NS {
	t.Helper()
	RequireRoot(t)
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("creating netns: %v", err)
	}
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatalf("opening netns: %v", err)
	}
	nh, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	_ = h.Close()
	if err != nil {
		t.Fatalf("netlink handle in netns: %v", err)
	}
	t.Cleanup(func() {
		nh.Close()
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	lo, err := nh.LinkByName("lo")
	if err == nil {
		err = nh.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("bringing up lo: %v", err)
	}
	return &NS{NetNS: n, Handle: nh, Name: filepath.Base(n.Path())}
}

// Veth creates a veth pair inside the namespace, both ends up, and
// returns the first end.
func (n *NS) Veth(t testing.TB, name, peer string) netlink.Link {
	t.Helper()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
	if err := n.Handle.LinkAdd(v); err != nil {
		t.Fatalf("adding veth %s/%s: %v", name, peer, err)
	}
	for _, nm := range []string{name, peer} {
		l, err := n.Handle.LinkByName(nm)
		if err != nil {
			t.Fatalf("veth %s: %v", nm, err)
		}
		if err := n.Handle.LinkSetUp(l); err != nil {
			t.Fatalf("veth %s up: %v", nm, err)
		}
	}
	l, err := n.Handle.LinkByName(name)
	if err != nil {
		t.Fatalf("veth %s: %v", name, err)
	}
	return l
}

// AddAddr puts an address with prefix (10.0.0.5/24, fd00::5/64) on a
// link; IPv6 ones without duplicate address detection.
func (n *NS) AddAddr(t testing.TB, link string, addr string) {
	t.Helper()
	l, err := n.Handle.LinkByName(link)
	if err != nil {
		t.Fatalf("link %s: %v", link, err)
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		t.Fatalf("parse %s: %v", addr, err)
	}
	if a.IP.To4() == nil {
		a.Flags |= unix.IFA_F_NODAD // usable at once, no DAD delay
	}
	if err := n.Handle.AddrAdd(l, a); err != nil {
		t.Fatalf("adding %s to %s: %v", addr, link, err)
	}
}

// Routes returns the namespace's main-table IPv4 routes keyed by prefix
// (only metric 0, the ones routed manages).
func (n *NS) Routes(t testing.TB) map[netip.Prefix]netlink.Route {
	t.Helper()
	return n.routes(t, netlink.FAMILY_V4, 0, "0.0.0.0/0")
}

// Routes6 returns the namespace's main-table IPv6 routes keyed by prefix
// (only metric 1024, the kernel's default and the one routed manages).
func (n *NS) Routes6(t testing.TB) map[netip.Prefix]netlink.Route {
	t.Helper()
	return n.routes(t, netlink.FAMILY_V6, 1024, "::/0")
}

func (n *NS) routes(t testing.TB, family, metric int, defaultDst string) map[netip.Prefix]netlink.Route {
	t.Helper()
	rs, err := n.Handle.RouteListFiltered(family, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("listing routes: %v", err)
	}
	out := map[netip.Prefix]netlink.Route{}
	for _, r := range rs {
		if r.Priority != metric {
			continue
		}
		p := netip.MustParsePrefix(defaultDst)
		if r.Dst != nil {
			p = IPNetPrefix(r.Dst)
		}
		out[p] = r
	}
	return out
}

// IPNetPrefix converts a *net.IPNet to a netip.Prefix.
func IPNetPrefix(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// MinWait is the shortest deadline Eventually gives: the timeouts
// the tests pass say what a quiet machine takes, but make test runs
// these tests beside the race pass, and on CI (2 cores, load up to 80)
// a felix start alone took 7 s and two VXLAN tests failed their 5 s
// waits. A longer deadline costs a passing test nothing: each wait ends
// at the positive event.
const MinWait = 30 * time.Second

// Eventually polls cond every 20ms until it returns "" or the deadline
// passes (timeout, at least MinWait), then fails with cond's last
// message.
func Eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	testenv.Eventually(t, max(timeout, MinWait), 20*time.Millisecond, cond)
}

// Do runs f inside the namespace on a locked OS thread.
func (n *NS) Do(t testing.TB, f func() error) {
	t.Helper()
	if err := n.NetNS.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

// ReadSysctl reads a /proc/sys file as seen from inside the namespace.
func (n *NS) ReadSysctl(t testing.TB, name string) string {
	t.Helper()
	var out string
	n.Do(t, func() error {
		b, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			return fmt.Errorf("reading %s in netns: %w", name, err)
		}
		out = string(b)
		return nil
	})
	return out
}
