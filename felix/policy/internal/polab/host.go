package polab

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// Peer is a machine outside the node, wired to one of the node's own
// interfaces (not a pod's): what host endpoints police.
type Peer struct {
	*nstest.NS
	// Iface is the node's side of the link.
	Iface string
	// IPv4 and IPv6 are the peer's addresses; NodeIPv4 and NodeIPv6
	// the node's on Iface.
	IPv4, IPv6, NodeIPv4, NodeIPv6 netip.Addr
}

// Addr returns the peer's address of the family (v6 true: IPv6).
func (p *Peer) Addr(v6 bool) netip.Addr {
	if v6 {
		return p.IPv6
	}
	return p.IPv4
}

// NodeAddr returns the node's address on the peer's link.
func (p *Peer) NodeAddr(v6 bool) netip.Addr {
	if v6 {
		return p.NodeIPv6
	}
	return p.NodeIPv4
}

// AddPeer creates a peer namespace linked to the node through iface,
// on subnet 10.<net>.0.0/24 and fd00:<net>::/64 (the node .1, the peer
// .2), with its default routes through the node, which forwards.
func (n *Node) AddPeer(t testing.TB, iface string, net int) *Peer {
	t.Helper()
	p := &Peer{NS: nstest.New(t), Iface: iface,
		IPv4: addrf(t, "10.%d.0.2", net), IPv6: addrf(t, "fd00:%d::2", net),
		NodeIPv4: addrf(t, "10.%d.0.1", net), NodeIPv6: addrf(t, "fd00:%d::1", net)}
	n.Veth(t, iface, "eth0")
	peer, err := n.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.LinkSetNsFd(peer, int(p.NetNS.Fd())); err != nil {
		t.Fatalf("moving eth0 to peer %s: %v", iface, err)
	}
	eth, err := p.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Handle.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	n.AddAddr(t, iface, p.NodeIPv4.String()+"/24")
	n.AddAddr(t, iface, p.NodeIPv6.String()+"/64")
	p.AddAddr(t, "eth0", p.IPv4.String()+"/24")
	p.AddAddr(t, "eth0", p.IPv6.String()+"/64")
	mustRoute(t, p.Handle, &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: p.NodeIPv4.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0"))})
	mustRoute(t, p.Handle, &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: p.NodeIPv6.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("::/0"))})
	return p
}

func addrf(t testing.TB, format string, net int) netip.Addr {
	t.Helper()
	return netip.MustParseAddr(fmt.Sprintf(format, net))
}

// Nft runs the nft binary in the namespace with script on its input
// (for the tables a test adds beside routed's: a NodePort's DNAT).
func Nft(t testing.TB, n *nstest.NS, script string) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+n.Path(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s\n%s", n.Name, err, out, script)
	}
}

// VXLAN links the node and a peer by a VXLAN device "vxlan0" on each
// (VNI 4096, port 4789, unicast to the other's address on the peer's
// link), the node 10.71.0.1/24 and the peer 10.71.0.2/24 on it.
func (n *Node) VXLAN(t testing.TB, p *Peer) {
	t.Helper()
	for _, side := range []struct {
		ns          *nstest.NS
		local, peer netip.Addr
		addr        string
	}{{n.NS, p.NodeIPv4, p.IPv4, "10.71.0.1/24"}, {p.NS, p.IPv4, p.NodeIPv4, "10.71.0.2/24"}} {
		v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxlan0"}, VxlanId: 4096, Port: 4789,
			SrcAddr: side.local.AsSlice(), Group: side.peer.AsSlice(), Learning: false}
		if err := side.ns.Handle.LinkAdd(v); err != nil {
			t.Fatalf("adding vxlan0 in %s: %v", side.ns.Name, err)
		}
		l, err := side.ns.Handle.LinkByName("vxlan0")
		if err != nil {
			t.Fatal(err)
		}
		if err := side.ns.Handle.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		side.ns.AddAddr(t, "vxlan0", side.addr)
	}
}
