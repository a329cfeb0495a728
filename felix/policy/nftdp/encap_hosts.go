package nftdp

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// Tunnel packets addressed to the node (IPIP, and UDP to a VXLAN port)
// are dropped unless their outer source is one of the cluster's nodes
// (or an external node range), as Calico's felix does while IPIP or
// VXLAN is on (its all-hosts ipset). The node's tunnel devices unwrap
// such a packet from any source on the input path, and the inner
// packet then arrives on the tunnel device: anyone who can reach the
// node could send a remote pod's address inside and pass a policy that
// admits only that pod. The check sits on the input hook (decapsulation
// follows local delivery: the ipip and vxlan receive handlers run after
// it), before the policy's own input chain; pods' interfaces are left
// to the workload encapsulation drop (encap.go).
//
// Tunnel packets arriving on lo are all dropped: routed never tunnels
// to its own node (routes and VTEPs are only ever for other nodes), and
// any local process (a hostNetwork pod's unprivileged UDP socket) could
// otherwise send a VXLAN frame to 127.0.0.1 or the node's own address
// with a spoofed inner source. Likewise a tunnel packet from outside
// whose source is one of this node's own addresses is dropped whatever
// the allowed set holds: IPv4 drops it as martian anyway (unless
// accept_local), IPv6 does not, and an externalNodesList range may
// cover the node.

// chainEncapSrc (input hook) sends tunnel packets from unknown sources
// to chainEncapSrcDrop, counted "encap-src/not-node" and logged
// "D encap-src not-node"; encapSrcSet holds the allowed sources.
const (
	chainEncapSrc     = "encap-src-check"
	chainEncapSrcDrop = "encap-src-drop"
	encapSrcSet       = "encap-src-nodes"
)

// EncapSrcDropID is the counter ID of the drop of tunnel packets from
// a source that is no node's.
const EncapSrcDropID = "encap-src/not-node"

// encapSrcPrio puts the check before the policy's input chain (0) and
// the host endpoints' (10); any priority on the input hook precedes
// decapsulation.
const encapSrcPrio = -5

// ipipProto is IPv4-in-IPv4, what tunl0 unwraps. IPv6 in IPv4 (41) is
// left alone: routed runs no such tunnel, and operators' own 6in4
// tunnels (to a broker) must keep working.
const ipipProto = 4

// encapSrcRules are the check's rules for the VXLAN ports: IPIP in
// IPv4, and UDP to a port in both families (vxlan-v6.routed runs over
// IPv6). Arriving on lo, from one of the node's own addresses, or from
// a source outside the set, they go to the drop.
func (d *Dataplane) encapSrcRules() []Rule {
	not := []string{d.cfg.IfacePrefix, "lo\x00"}
	ipip := Rule{IPVersion: 4, Proto: ipipProto}
	var udp *Rule
	if len(d.encapPorts) > 0 {
		udp = &Rule{Proto: 17}
		for _, p := range d.encapPorts {
			udp.Dst.Ports = append(udp.Dst.Ports, PortRange{p, p})
		}
	}
	var rs []Rule
	add := func(set func(r *Rule)) {
		for _, base := range []*Rule{&ipip, udp} {
			if base == nil {
				continue
			}
			r := *base
			r.Dst.Ports = slices.Clone(base.Dst.Ports)
			r.Action, r.Target = ActJump, chainEncapSrcDrop
			set(&r)
			rs = append(rs, r)
		}
	}
	add(func(r *Rule) { r.InIface = "lo\x00" })
	add(func(r *Rule) { r.NotInIfaces, r.Action = not, ActGotoAnyLocalSrc })
	add(func(r *Rule) { r.NotInIfaces, r.Src = not, Side{NotSets: []string{encapSrcSet}} })
	return rs
}

// SetEncapSources sets the addresses and nets tunnel packets to the
// node may come from (every node's addresses and the external node
// nets) and reports whether they changed. Tunnel packets on lo or from
// the node's own addresses are dropped whatever srcs holds. Until it is first called
// there is no check (a Dataplane whose user runs no tunnels, or has
// not learnt the nodes yet); from then on packets from any other source
// are dropped, and an empty list drops them all. felix calls it before
// its tunnel devices come up. The VXLAN ports checked are those of
// SetWorkloadEncapPorts.
func (d *Dataplane) SetEncapSources(srcs []netip.Prefix) bool {
	want := make([]netip.Prefix, 0, len(srcs))
	for _, p := range srcs {
		if p.IsValid() && p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.IsValid() {
			want = append(want, p.Masked())
		}
	}
	slices.SortFunc(want, comparePrefix)
	want = slices.Compact(want)
	if d.encapSrc != nil && slices.Equal(want, d.encapSrc) {
		return false
	}
	if d.encapSrc == nil {
		d.AddSet(encapSrcSet, AddrSet)
		d.addInternal(chainEncapSrcDrop, nil, d.dropRules("encap-src", "not-node"))
		d.encapSrc = []netip.Prefix{}
	}
	for _, p := range d.encapSrc {
		if _, ok := slices.BinarySearchFunc(want, p, comparePrefix); !ok {
			d.RemoveMember(encapSrcSet, Member{Prefix: p})
		}
	}
	for _, p := range want {
		if _, ok := slices.BinarySearchFunc(d.encapSrc, p, comparePrefix); !ok {
			d.AddMember(encapSrcSet, Member{Prefix: p})
		}
	}
	d.encapSrc = want
	d.syncEncapSrcChain()
	return true
}

// syncEncapSrcChain (re)writes the check after its ports changed; a
// no-op before SetEncapSources.
func (d *Dataplane) syncEncapSrcChain() {
	if d.encapSrc == nil {
		return
	}
	in := nftables.ChainHookInput
	d.setInternal(chainEncapSrc, &hook{num: in, prio: nftables.ChainPriorityRef(encapSrcPrio)}, d.encapSrcRules())
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
