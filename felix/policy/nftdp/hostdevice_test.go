package nftdp_test

import (
	"testing"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestHostDeviceFollowsUplink (issue 40): a device that carries the
// uplink's traffic (a veth named wg.routed here, as WireGuard's device
// is) is policed by the uplink's named host endpoint in both directions
// once SetHostDevices says so; with its uplink unknown, its new traffic
// to and from the host is dropped (fail closed) while the uplink's own
// endpoint still applies; mapped to an uplink no named endpoint governs,
// it is as unpoliced as that uplink. Real TCP and ICMP from peers on
// each interface, IPv4 and IPv6.
func TestHostDeviceFollowsUplink(t *testing.T) {
	node := polab.NewNode(t)
	up := node.AddPeer(t, "up0", 71)
	dev := node.AddPeer(t, "wg.routed", 72)
	for _, p := range []int{8080, 9090} {
		polab.Serve(t, node.NS, p)
		polab.Serve(t, up.NS, p)
		polab.Serve(t, dev.NS, p)
	}
	d := newDP(t, node)
	// The uplink's endpoint: TCP 9090 in, nothing else; out, TCP 9090
	// only.
	only9090 := func(name string) {
		if err := d.SetChain(name, []nftdp.Rule{
			{Proto: 6, Dst: nftdp.Side{Ports: []nftdp.PortRange{{9090, 9090}}}, Action: nftdp.ActAccept},
			{Action: nftdp.ActDrop},
		}); err != nil {
			t.Fatal(err)
		}
	}
	only9090("h-in")
	only9090("h-out")
	d.SetHostEndpoints(nftdp.HostEndpoints{Endpoints: []nftdp.HostChains{{Iface: "up0", In: "h-in", Out: "h-out"}}})
	apply(t, d)

	expect := func(phase string, p *polab.Peer, port int, in, out bool) {
		t.Helper()
		for _, v6 := range []bool{false, true} {
			polab.Expect(t, p.NS, polab.Probe{Proto: "tcp", Dst: p.NodeAddr(v6), Port: port}, in, phase+": "+p.Iface+" peer to the host")
			polab.Expect(t, node.NS, polab.Probe{Proto: "tcp", Dst: p.Addr(v6), Port: port}, out, phase+": host to the "+p.Iface+" peer")
		}
	}
	expect("uplink", up, 8080, false, false)
	expect("uplink", up, 9090, true, true)
	// Without the mapping the device is not policed: the hole issue 40
	// found.
	expect("device not mapped", dev, 8080, true, true)

	if !d.SetHostDevices([]nftdp.HostDevice{{Device: "wg.routed", Uplink: "up0"}}) {
		t.Fatal("SetHostDevices: a new mapping reported no change")
	}
	if d.SetHostDevices([]nftdp.HostDevice{{Device: "wg.routed", Uplink: "up0"}}) {
		t.Error("SetHostDevices: the same mapping again reported a change")
	}
	apply(t, d)
	expect("device follows up0", dev, 8080, false, false)
	expect("device follows up0", dev, 9090, true, true)
	expect("uplink still", up, 8080, false, false)

	// Unknown uplink: fail closed on the device, the uplink unchanged.
	d.SetHostDevices([]nftdp.HostDevice{{Device: "wg.routed"}})
	apply(t, d)
	expect("uplink unknown", dev, 9090, false, false)
	expect("uplink unknown", dev, 8080, false, false)
	expect("uplink unknown, the uplink itself", up, 9090, true, true)

	// An uplink without a named endpoint: the device is as free as it.
	d.SetHostDevices([]nftdp.HostDevice{{Device: "wg.routed", Uplink: "eth9"}})
	apply(t, d)
	expect("uplink without an endpoint", dev, 8080, true, true)

	// No named endpoint at all: nothing to follow, nothing dropped.
	d.SetHostDevices([]nftdp.HostDevice{{Device: "wg.routed"}})
	d.SetHostEndpoints(nftdp.HostEndpoints{Endpoints: []nftdp.HostChains{{Iface: nftdp.WildcardIface, In: "h-in", Out: "h-out"}}})
	apply(t, d)
	expect("only a \"*\" endpoint", dev, 8080, false, false)
	expect("only a \"*\" endpoint", dev, 9090, true, true)
}
