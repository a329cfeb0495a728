package felix_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
)

// byIPLab is felix's namespace (the host) with three interfaces, each
// to a peer namespace of its own: eth0 and eth1 each hold one of the
// host endpoint's expected addresses (IPv4 and IPv6), eth1 and eth2
// also hold addresses no endpoint expects. The host serves TCP on 22
// (a failsafe port), 80 and 8080.
type byIPLab struct {
	h     *harness
	peers map[string]*nstest.NS // by host interface
}

// byIPModel is node-a's host endpoint found by its addresses (eth0's
// and eth1's, IPv4 and IPv6) and a policy allowing it TCP 80 in.
const byIPModel = `
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a, labels: {role: edge}}
spec: {node: node-a, expectedIPs: [192.0.2.1, "fd00:a::1", 198.51.100.1, "fd00:b::1"]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: edge-http}
spec:
  selector: role == 'edge'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
`

// The host's addresses that move (eth1's expected ones) and its plain
// ones, by interface.
var (
	byIPMoving = []string{"198.51.100.1/24", "fd00:b::1/64"}
	byIPPlain  = map[string][]string{"eth1": {"198.18.1.1", "fd00:b1::1"}, "eth2": {"203.0.113.1", "fd00:c::1"}}
)

func newByIPLab(t *testing.T) *byIPLab {
	h := newHarness(t, func(c *felix.Config) {
		c.Features.DisablePolicy = false
		// Nothing but the address watch may find the moves: a resync
		// would look the interfaces up again too.
		c.ResyncInterval = time.Hour
	})
	l := &byIPLab{h: h, peers: map[string]*nstest.NS{}}
	// eth0 exists with 192.0.2.1/24 (newHarness); eth1 and eth2 are new.
	h.ns.Veth(t, "eth1", "eth1peer")
	h.ns.Veth(t, "eth2", "eth2peer")
	for iface, addrs := range map[string][]string{
		"eth0": {"fd00:a::1/64"},
		"eth1": {"198.51.100.1/24", "fd00:b::1/64", "198.18.1.1/24", "fd00:b1::1/64"},
		"eth2": {"203.0.113.1/24", "fd00:c::1/64"},
	} {
		for _, a := range addrs {
			h.ns.AddAddr(t, iface, a)
		}
		peer := nstest.New(t)
		link, err := h.ns.Handle.LinkByName(iface + "peer")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.ns.Handle.LinkSetNsFd(link, int(peer.NetNS.Fd())); err != nil {
			t.Fatal(err)
		}
		if pl, err := peer.Handle.LinkByName(iface + "peer"); err != nil || peer.Handle.LinkSetUp(pl) != nil {
			t.Fatalf("peer of %s: %v", iface, err)
		}
		l.peers[iface] = peer
	}
	for iface, addrs := range map[string][]string{
		"eth0": {"192.0.2.2/24", "fd00:a::2/64"},
		"eth1": {"198.51.100.2/24", "fd00:b::2/64", "198.18.1.2/24", "fd00:b1::2/64"},
		"eth2": {"203.0.113.2/24", "fd00:c::2/64", "198.51.100.3/24", "fd00:b::3/64"},
	} {
		for _, a := range addrs {
			l.peers[iface].AddAddr(t, iface+"peer", a)
		}
	}
	for _, port := range []string{"22", "80", "8080"} {
		acceptTCP(t, h.ns, ":"+port) // IPv4 and IPv6
	}
	return l
}

// acceptTCP accepts (and closes) TCP connections to addr in ns until
// the test ends.
func acceptTCP(t *testing.T, ns *nstest.NS, addr string) {
	t.Helper()
	var ln net.Listener
	ns.Do(t, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// dial reports whether a TCP connection from the peer behind iface to
// the host's addr and port is answered.
func (l *byIPLab) dial(t *testing.T, iface, addr, port string) bool {
	var ok bool
	l.peers[iface].Do(t, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, port), 300*time.Millisecond)
		if err == nil {
			c.Close()
		}
		ok = err == nil
		return nil
	})
	return ok
}

// verdict is what a connection from the peer behind iface to the
// host's addr and port should meet.
type verdict struct {
	iface, addr, port string
	pass              bool
}

// governed are the verdicts of a governed interface reached at addrs:
// the policy's port answers, another is dropped, the failsafe port
// answers.
func governed(iface string, addrs ...string) []verdict {
	var out []verdict
	for _, a := range addrs {
		out = append(out, verdict{iface, a, "80", true}, verdict{iface, a, "8080", false}, verdict{iface, a, "22", true})
	}
	return out
}

// ungoverned are the verdicts of an interface no endpoint governs.
func ungoverned(iface string, addrs ...string) []verdict {
	var out []verdict
	for _, a := range addrs {
		out = append(out, verdict{iface, a, "80", true}, verdict{iface, a, "8080", true})
	}
	return out
}

// expect waits (10 s at most) until every connection meets its verdict.
func (l *byIPLab) expect(t *testing.T, why string, vs ...[]verdict) {
	t.Helper()
	nstest.Eventually(t, 10*time.Second, func() string {
		for _, group := range vs {
			for _, v := range group {
				if got := l.dial(t, v.iface, v.addr, v.port); got != v.pass {
					return fmt.Sprintf("%s: %s -> [%s]:%s %s", why, v.iface, v.addr, v.port,
						map[bool]string{true: "answered, want dropped", false: "dropped, want answered"}[got])
				}
			}
		}
		return ""
	})
}

// addrs adds (or deletes) the moving addresses on iface, and returns
// when the kernel has done so.
func (l *byIPLab) addrs(t *testing.T, iface string, add bool) {
	t.Helper()
	link, err := l.h.ns.Handle.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range byIPMoving {
		a, err := netlink.ParseAddr(s)
		if err != nil {
			t.Fatal(err)
		}
		if a.IP.To4() == nil {
			a.Flags |= unix.IFA_F_NODAD
		}
		if add {
			err = l.h.ns.Handle.AddrAdd(link, a)
		} else {
			err = l.h.ns.Handle.AddrDel(link, a)
		}
		if err != nil {
			t.Fatalf("address %s on %s (add %v): %v", s, iface, add, err)
		}
	}
}

// dispatches reports whether the host's IPv4 input dispatch names
// iface (a measurement of how soon felix follows an address; verdicts
// are proved with traffic).
func dispatches(c *nftables.Conn, iface string) bool {
	rules, err := c.GetRules(&nftables.Table{Name: "routed-policy", Family: nftables.TableFamilyIPv4}, &nftables.Chain{Name: "host-input"})
	if err != nil {
		return false
	}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if cmp, ok := e.(*expr.Cmp); ok && bytes.Equal(cmp.Data, []byte(iface+"\x00")) {
				return true
			}
		}
	}
	return false
}

// TestHostEndpointByIPTraffic: a HostEndpoint that names no
// interface governs every interface holding one of its expectedIPs, as
// in Calico, with real TCP over IPv4 and IPv6: a policy allowing port
// 80 and nothing else (8080 dropped, the failsafe port 22 open) holds
// on eth0 and eth1, each holding one expected address, for traffic to
// any of their addresses, while eth2 stays open. Then the address of
// eth1 moves to eth2 at runtime (resync an hour away: only felix's
// address watch can see it): connections to it on eth2 made at once,
// before felix can have seen the move, are already policed (the
// kernel's check, nftdp.HostByAddr); then all of eth2 is governed, eth1
// open; the address removed, eth2 is open again; added back on eth1,
// eth1 is governed (how soon felix dispatches it is logged).
func TestHostEndpointByIPTraffic(t *testing.T) {
	l := newByIPLab(t)
	h := l.h
	h.f.ReplaceResources(map[api.Kind][]api.Resource{api.KindIPPool: nil, api.KindNode: nil, api.KindWorkloadEndpoint: nil})
	h.f.ReplaceAffinities(nil)
	eth0 := []string{"192.0.2.1", "fd00:a::1"}
	eth1 := append([]string{"198.51.100.1", "fd00:b::1"}, byIPPlain["eth1"]...)
	eth2 := byIPPlain["eth2"]
	l.expect(t, "no host endpoint", ungoverned("eth0", eth0...), ungoverned("eth1", eth1...), ungoverned("eth2", eth2...))

	d, err := api.Decode([]byte(byIPModel))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		h.f.SetResource(r)
	}
	l.expect(t, "found on eth0 and eth1", governed("eth0", eth0...), governed("eth1", eth1...), ungoverned("eth2", eth2...))

	// Move eth1's expected addresses to eth2 and connect to them there
	// at once: the kernel polices them before felix has seen the move.
	nft := nftConn(t, h)
	l.addrs(t, "eth1", false)
	l.addrs(t, "eth2", true)
	inWindow := !dispatches(nft, "eth2")
	for _, a := range []string{"198.51.100.1", "fd00:b::1"} {
		if l.dial(t, "eth2", a, "8080") {
			t.Errorf("[%s]:8080 answered on eth2 right after the address moved there", a)
		}
	}
	t.Logf("connections right after the move were made before felix dispatched eth2: %v", inWindow)
	l.expect(t, "moved from eth1 to eth2", governed("eth0", eth0...), ungoverned("eth1", byIPPlain["eth1"]...),
		governed("eth2", append([]string{"198.51.100.1", "fd00:b::1"}, eth2...)...))

	l.addrs(t, "eth2", false)
	l.expect(t, "gone from eth2", governed("eth0", eth0...), ungoverned("eth1", byIPPlain["eth1"]...), ungoverned("eth2", eth2...))

	start := time.Now()
	l.addrs(t, "eth1", true)
	testenv.Eventually(t, 5*time.Second, time.Millisecond, func() string {
		if !dispatches(nft, "eth1") {
			return "eth1 not dispatched since the address was added back to it"
		}
		return ""
	})
	t.Logf("eth1 dispatched %v after the address was added to it", time.Since(start).Round(time.Millisecond))
	l.expect(t, "back on eth1", governed("eth0", eth0...), governed("eth1", eth1...), ungoverned("eth2", eth2...))

	h.f.DeleteResource(api.KindHostEndpoint, "node-a")
	l.expect(t, "host endpoint deleted", ungoverned("eth0", eth0...), ungoverned("eth1", eth1...), ungoverned("eth2", eth2...))
}
