package confd

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/selector"
	"github.com/routed-net/routed/routed/bgp"
)

// Workload peering (BGPPeer localWorkloadSelector), as Calico's felix
// (ActiveBGPPeerCalculator) and confd do it:
//
//   - A BGPPeer with localWorkloadSelector applies to the nodes its
//     node/nodeSelector picks; on those, it matches this node's
//     WorkloadEndpoints by their labels and those of their profiles (the
//     endpoint's own win).
//   - An endpoint matched by several such BGPPeers peers with the first
//     by name only: one session per pod address.
//   - The session is passive (the pod dials), from the pod's first
//     address of each family, with AS asNumber, multihop, no source
//     address, and the BGPPeer's localASNumber, filters and timers.
//     What the pod advertises stays on this node (NoAdvertise): Calico
//     exports a workload's routes to no other peer.
//   - Felix puts BGPConfiguration "default"'s localWorkloadPeeringIPV4
//     (IPV6) on the host side of the endpoint's interface when it has an
//     address of that family: that is the address the pod dials. Without
//     it the session is still configured (as in Calico) and warned about.

// workloadPeers picks, for each of this node's endpoints, the BGPPeer it
// peers through (nil: none). peers are sorted by name.
func workloadPeers(in Input, me *api.Node, peers []*api.BGPPeer) (map[string]*api.BGPPeer, []string) {
	type sel struct {
		bp *api.BGPPeer
		s  selector.Selector
	}
	var sels []sel
	var warn []string
	for _, bp := range peers {
		if bp.Spec.LocalWorkloadSelector == "" {
			continue
		}
		appliesTo, err := peerAppliesTo(bp)
		if err != nil || !appliesTo(me) {
			continue // peerAppliesTo's error is warned about by Compute
		}
		s, err := selector.Parse(bp.Spec.LocalWorkloadSelector)
		if err != nil {
			warn = append(warn, fmt.Sprintf("BGPPeer %q: localWorkloadSelector: %v", bp.Metadata.Name, err))
			continue
		}
		sels = append(sels, sel{bp, s})
	}
	if len(sels) == 0 {
		return nil, warn
	}
	out := map[string]*api.BGPPeer{}
	for _, w := range in.Workloads {
		if w.Spec.Node != in.NodeName {
			continue
		}
		labels := workloadLabels(w, in.Profiles)
		for _, s := range sels {
			if s.s.Evaluate(labels) {
				out[w.Metadata.Name] = s.bp
				break
			}
		}
	}
	return out, warn
}

// workloadLabels are an endpoint's labels with those of its profiles
// inherited (earlier profiles, then the endpoint's own, win).
func workloadLabels(w *api.WorkloadEndpoint, profiles map[string]*api.Profile) map[string]string {
	out := map[string]string{}
	for _, name := range slices.Backward(w.Spec.Profiles) {
		if p := profiles[name]; p != nil {
			maps.Copy(out, p.Spec.LabelsToApply)
		}
	}
	maps.Copy(out, w.Metadata.Labels)
	return out
}

// workloadAddrs are an endpoint's first IPv4 and first IPv6 address (as
// Calico's confd takes the first of each family); invalid when it has
// none of a family.
func workloadAddrs(w *api.WorkloadEndpoint) (v4, v6 netip.Addr) {
	for _, n := range w.Spec.IPNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			continue
		}
		switch a := p.Addr(); {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	return v4, v6
}

// workloadCandidates are the sessions with the endpoints bp was picked
// for (by workloadPeers), before the BGPPeer's settings are applied.
func workloadCandidates(in Input, bp *api.BGPPeer, picked map[string]*api.BGPPeer, prio int) []candidate {
	var out []candidate
	for _, w := range sortedWorkloads(in.Workloads) {
		if picked[w.Metadata.Name] != bp {
			continue
		}
		v4, v6 := workloadAddrs(w)
		for _, a := range []netip.Addr{v4, v6} {
			if !a.IsValid() {
				continue
			}
			out = append(out, candidate{prio: prio, PeerSpec: PeerSpec{Peer: bgp.Peer{
				Address: a, ASN: uint32(bp.Spec.ASNumber), Type: bgp.PeerTypeLocalWorkload,
				Name: workloadName(w), Passive: true, Multihop: true, NoAdvertise: true,
			}}})
		}
	}
	return out
}

// workloadPeeringAddrs are, per pod interface, the peering addresses
// felix puts on its host side: "default"'s localWorkloadPeeringIPV4 and
// IPV6, for each family the pod has a session in.
func workloadPeeringAddrs(in Input, def *api.BGPConfiguration, picked map[string]*api.BGPPeer) (map[string][]netip.Addr, []string) {
	if len(picked) == 0 {
		return nil, nil
	}
	var p4, p6 netip.Addr
	if def != nil {
		p4, _ = netip.ParseAddr(def.Spec.LocalWorkloadPeeringIPV4)
		p6, _ = netip.ParseAddr(def.Spec.LocalWorkloadPeeringIPV6)
	}
	out := map[string][]netip.Addr{}
	var warn []string
	for _, w := range sortedWorkloads(in.Workloads) {
		if picked[w.Metadata.Name] == nil {
			continue
		}
		v4, v6 := workloadAddrs(w)
		for _, f := range []struct {
			pod, peering netip.Addr
			field        string
		}{{v4, p4, "localWorkloadPeeringIPV4"}, {v6, p6, "localWorkloadPeeringIPV6"}} {
			switch {
			case !f.pod.IsValid():
			case !f.peering.IsValid():
				warn = append(warn, fmt.Sprintf("workload %s (%s) peers through BGPPeer %q but BGPConfiguration \"default\" has no %s: the pod has nothing to dial",
					workloadName(w), f.pod, picked[w.Metadata.Name].Metadata.Name, f.field))
			default:
				out[w.Spec.InterfaceName] = append(out[w.Spec.InterfaceName], f.peering)
			}
		}
	}
	return out, warn
}

func workloadName(w *api.WorkloadEndpoint) string {
	if w.Spec.Pod != "" {
		return cmp.Or(w.Spec.Namespace, "default") + "/" + w.Spec.Pod
	}
	return w.Metadata.Name
}

func sortedWorkloads(ws []*api.WorkloadEndpoint) []*api.WorkloadEndpoint {
	out := slices.Clone(ws)
	slices.SortFunc(out, func(a, b *api.WorkloadEndpoint) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	return out
}
