package felix_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
)

// windowDials is how many connections each window probe tries: every
// one must be dropped (a count, not one lucky miss).
const windowDials = 5

// byIPOpenEth2 adds to byIPModel a HostEndpoint naming eth2 whose policy
// allows everything; its name sorts after node-a's, so node-a wins eth2
// as soon as eth2 holds one of node-a's addresses (Calico's order).
const byIPOpenEth2 = `
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: zz-eth2, labels: {role: open}}
spec: {node: node-a, interfaceName: eth2}
` + openAllGNP

// openAllGNP allows everything to and from what is labelled role=open.
const openAllGNP = `
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: open-all}
spec:
  selector: role == 'open'
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`

// feed gives felix the resources of a YAML model.
func (l *byIPLab) feed(t *testing.T, model string) {
	t.Helper()
	h := l.h
	h.f.ReplaceResources(map[api.Kind][]api.Resource{api.KindIPPool: nil, api.KindNode: nil, api.KindWorkloadEndpoint: nil})
	h.f.ReplaceAffinities(nil)
	d, err := api.Decode([]byte(model))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		h.f.SetResource(r)
	}
}

// dialFrom reports whether a TCP connection from the peer behind iface,
// from its address src (any when invalid), to the host's addr and port
// is answered.
func (l *byIPLab) dialFrom(t *testing.T, iface string, src netip.Addr, addr, port string) bool {
	var ok bool
	l.peers[iface].Do(t, func() error {
		d := net.Dialer{Timeout: 300 * time.Millisecond}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		c, err := d.Dial("tcp", net.JoinHostPort(addr, port))
		if err == nil {
			c.Close()
		}
		ok = err == nil
		return nil
	})
	return ok
}

// through counts the connections of windowDials tries that are answered.
func (l *byIPLab) through(t *testing.T, iface string, src netip.Addr, addr, port string) int {
	n := 0
	for range windowDials {
		if l.dialFrom(t, iface, src, addr, port) {
			n++
		}
	}
	return n
}

// probe is one connection and whether it must be answered.
type probe struct {
	iface string
	src   netip.Addr
	addr  string
	port  string
	pass  bool
}

// now checks each probe once, at once: in a window felix is held in,
// nothing changes until it is released.
func (l *byIPLab) now(t *testing.T, why string, ps ...probe) {
	t.Helper()
	for _, p := range ps {
		if !p.pass {
			if n := l.through(t, p.iface, p.src, p.addr, p.port); n > 0 {
				t.Errorf("%s: %d of %d connections %s -> [%s]:%s answered, want none", why, n, windowDials, p.iface, p.addr, p.port)
			}
		} else if !l.dialFrom(t, p.iface, p.src, p.addr, p.port) {
			t.Errorf("%s: %s -> [%s]:%s dropped, want answered", why, p.iface, p.addr, p.port)
		}
	}
}

// eventually waits (10 s at most) until every probe meets its verdict.
func (l *byIPLab) eventually(t *testing.T, why string, ps ...probe) {
	t.Helper()
	nstest.Eventually(t, 10*time.Second, func() string {
		for _, p := range ps {
			if got := l.dialFrom(t, p.iface, p.src, p.addr, p.port); got != p.pass {
				return fmt.Sprintf("%s: %s -> [%s]:%s answered %v, want %v", why, p.iface, p.addr, p.port, got, p.pass)
			}
		}
		return ""
	})
}

// policed are a governed address's probes: the policy's 80 and the
// failsafe 22 answered, 8080 dropped.
func policed(iface string, src netip.Addr, addrs ...string) []probe {
	var out []probe
	for _, a := range addrs {
		out = append(out, probe{iface, src, a, "80", true}, probe{iface, src, a, "8080", false}, probe{iface, src, a, "22", true})
	}
	return out
}

// open are an ungoverned (or allow-all) address's probes.
func open(iface string, src netip.Addr, addrs ...string) []probe {
	var out []probe
	for _, a := range addrs {
		out = append(out, probe{iface, src, a, "80", true}, probe{iface, src, a, "8080", true})
	}
	return out
}

// waitHeld waits until felix's loop is held before looking the
// addresses up again (it has seen the change and not acted on it).
func waitHeld(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("felix did not see the address change within 10 s")
	}
}

func cat(groups ...[]probe) []probe {
	var out []probe
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// TestHostEndpointByIPGuardBeforeOtherEndpoint: node-a's address moved
// to eth2, which another endpoint (zz-eth2, allow-all, ranked after
// node-a) governs, is policed by node-a from the kernel's first packet
// on, while felix is held back before it looks the addresses up
// (HoldHostAddrs): no connection to the moved address on 8080 gets
// through (IPv4 and IPv6), 80 and the failsafe 22 answer. Before the
// guard was ranked among the dispatched interfaces, zz-eth2's dispatch
// came first and let all of them through. The rest of eth2's traffic
// stays zz-eth2's until felix looks; then node-a governs all of eth2.
func TestHostEndpointByIPGuardBeforeOtherEndpoint(t *testing.T) {
	l := newByIPLab(t)
	l.feed(t, byIPModel+byIPOpenEth2)
	none := netip.Addr{}
	moved := []string{"198.51.100.1", "fd00:b::1"}
	l.eventually(t, "before the move", cat(policed("eth1", none, moved...), open("eth2", none, byIPPlain["eth2"]...))...)

	entered, release := l.h.f.HoldHostAddrs(t)
	l.addrs(t, "eth1", false)
	l.addrs(t, "eth2", true)
	waitHeld(t, entered)
	l.now(t, "moved, felix held", cat(policed("eth2", none, moved...), open("eth2", none, byIPPlain["eth2"]...))...)

	release()
	l.eventually(t, "moved, felix has looked", policed("eth2", none, append(moved, byIPPlain["eth2"]...)...)...)
}

// TestHostEndpointByIPSameIPv4TwoInterfaces: an expected IPv4 address
// held by two interfaces is policed on both, before and after felix
// looks. eth1 holds 198.51.100.1; the same address is added to eth2
// (no endpoint governs eth2) while felix is held back: the kernel's
// per-interface check sees it local on eth1 only (the first local
// route), and before the any-interface guard no connection from eth2's
// side was policed. Now none on 8080 gets through on either interface
// in the window; once felix has looked, all of eth2 is node-a's.
func TestHostEndpointByIPSameIPv4TwoInterfaces(t *testing.T) {
	l := newByIPLab(t)
	l.feed(t, byIPModel)
	none := netip.Addr{}
	// eth2's peer reaches 198.51.100.1 on eth2 (its 198.51.100.3/24)
	// from 203.0.113.2, which the host answers through eth2.
	src2 := netip.MustParseAddr("203.0.113.2")
	l.eventually(t, "before", cat(policed("eth1", none, "198.51.100.1"), open("eth2", none, byIPPlain["eth2"]...))...)

	entered, release := l.h.f.HoldHostAddrs(t)
	link, err := l.h.ns.Handle.LinkByName("eth2")
	if err != nil {
		t.Fatal(err)
	}
	a, err := netlink.ParseAddr("198.51.100.1/32")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.h.ns.Handle.AddrAdd(link, a); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, entered)
	l.now(t, "on both, felix held", cat(policed("eth1", none, "198.51.100.1"), policed("eth2", src2, "198.51.100.1"),
		open("eth2", none, "203.0.113.1"))...)

	release()
	l.eventually(t, "on both, felix has looked", cat(policed("eth1", none, "198.51.100.1"), policed("eth2", src2, "198.51.100.1"),
		policed("eth2", none, byIPPlain["eth2"]...))...)
}
