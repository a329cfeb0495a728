package felix

import (
	"context"
	"net/netip"
	"slices"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// syncEncapPorts gives the policy dataplane the UDP ports whose packets
// from pods are dropped as encapsulated (nftdp/encap.go): VXLAN's IANA
// port and every port this felix has configured its VXLAN devices with.
// A port stays dropped after the VXLAN port changes (until felix
// restarts), and a new one is dropped before the devices move to it
// (coverVXLANPort): a pod must never meet a device on a port the drop
// does not cover.
func (l *loop) syncEncapPorts() {
	p := uint16(l.cfg.vxlanPort())
	if !slices.Contains(l.hosts.encapPorts, p) {
		l.hosts.encapPorts = append(l.hosts.encapPorts, p)
	}
	if !slices.Contains(l.hosts.encapPorts, nftdp.DefaultVXLANPort) {
		l.hosts.encapPorts = append(l.hosts.encapPorts, nftdp.DefaultVXLANPort)
	}
	if l.policy.SetWorkloadEncapPorts(l.hosts.encapPorts) {
		l.policyDirty = true
	}
}

// coverVXLANPort makes sure the policy dataplane drops pods' UDP to the
// configured VXLAN port before the devices are (re)created on it: when
// the port is not covered yet (felix's start, a port FelixConfiguration
// just set), the policy is applied now, with full's resync. It reports
// whether the devices may be applied (when the policy write failed they
// stay as they are, on a covered port, until the retry) and whether it
// applied the policy.
func (l *loop) coverVXLANPort(ctx context.Context, full bool) (ok, applied bool, err error) {
	if l.policy == nil || slices.Contains(l.hosts.encapPorts, uint16(l.cfg.vxlanPort())) {
		return true, false, nil
	}
	l.syncEncapPorts()
	if err := l.applyPolicy(ctx, full); err != nil {
		return false, true, err
	}
	return true, true, nil
}

// encapSrcState is what felix knows of the sources allowed to send this
// node IPIP and VXLAN packets beyond the nodes (nftdp/encap_hosts.go).
type encapSrcState struct {
	// external are FelixConfiguration's externalNodesList nets.
	external []netip.Prefix
	// applied says the policy dataplane has written the sources (and
	// the check) at least once: tunnel devices wait for it.
	applied bool
}

// SetExternalNodes sets the addresses and nets, beyond every node's own,
// that may send this node IPIP and VXLAN packets (FelixConfiguration's
// externalNodesList, parsed by api.ExternalNodeNets); nil: none. Safe for
// concurrent use; it only queues the change, which the loop applies on
// its next pass (before any tunnel device comes up, when given before
// Run).
func (f *Felix) SetExternalNodes(nets []netip.Prefix) {
	nets = slices.Clone(nets)
	f.enqueue(func(l *loop) {
		if slices.Equal(l.encapSrc.external, nets) {
			return
		}
		l.log.WithField("externalNodesList", nets).Info("tunnel packets' extra allowed sources from FelixConfiguration")
		l.encapSrc.external = nets
		l.hosts.peersDirty = true
	})
}

// syncEncapSources gives the policy dataplane every source allowed to
// send this node tunnel packets: each node's BGP addresses
// (nodeHostAddrs) and the external nets. The datastore knows no other address of a
// node: a node whose packets leave from another address (a second
// uplink) must be listed in externalNodesList (docs/policy.md). It runs
// with the tunnel peers: when a Node changes, when the external nets
// change and at every full resync.
func (l *loop) syncEncapSources() {
	var srcs []netip.Prefix
	for _, n := range l.st.nodes {
		for _, a := range nodeHostAddrs(n) {
			srcs = append(srcs, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	srcs = append(srcs, l.encapSrc.external...)
	if l.policy.SetEncapSources(srcs) {
		l.policyDirty = true
	}
}

// coverEncapSources makes sure the policy dataplane drops tunnel packets
// from strangers before a tunnel device (tunl0, the VXLAN devices) is
// created or brought up: until the sources were written once, the
// policy is applied now (with full's resync). It reports whether the
// devices may be applied (not while that write fails: they wait for the
// retry) and whether it applied the policy. Without a policy
// dataplane (--disable-policy) there is no check at all: the devices
// unwrap tunnel packets from any source, as routed's start-up warning
// and docs/tunnel-sources.md say.
func (l *loop) coverEncapSources(ctx context.Context, full bool) (ok, applied bool, err error) {
	if l.policy == nil || l.encapSrc.applied {
		return true, false, nil
	}
	l.hosts.peersDirty = true // applyPolicy syncs the sources
	if err := l.applyPolicy(ctx, full); err != nil {
		return false, true, err
	}
	l.encapSrc.applied = true
	return true, true, nil
}

// nodeHostAddrs are a node's host addresses as its record gives them:
// its BGP IPv4 and IPv6 addresses, with or without a prefix length.
func nodeHostAddrs(n *api.Node) []netip.Addr {
	if n.Spec.BGP == nil {
		return nil
	}
	var out []netip.Addr
	for _, s := range []string{n.Spec.BGP.IPv4Address, n.Spec.BGP.IPv6Address} {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Addr())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}
