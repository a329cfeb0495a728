package flowlog

import (
	"github.com/routed-net/routed/felix/policy"
)

// Resolve turns a logged packet into a record: the rule its nflog
// prefix names in the policy model, the endpoint of the interface that
// rule's direction looks at (input for egress and to-host, output for
// ingress) and the packet's addresses, protocol and ports. ifname names
// an interface index (empty when unknown).
func Resolve(p Packet, idx *policy.RuleIndex, ifname func(uint32) string) Record {
	rec := Record{Time: p.Time, Rule: -1}
	if ri, verdict, ok := idx.Resolve(p.Prefix); ok {
		rec.Verdict, rec.Direction, rec.Kind = verdict, ri.Direction, ri.Kind
		rec.Tier, rec.Policy, rec.Profile, rec.Rule = ri.Tier, ri.Policy, ri.Profile, ri.Index
		rec.Action, rec.RuleID = ri.Action, ri.ID
	} else {
		rec.Prefix = p.Prefix
	}
	ifindex := p.InIfindex
	if rec.Direction == "ingress" {
		ifindex = p.OutIfindex
	}
	if ifindex != 0 && ifname != nil {
		rec.Iface = ifname(ifindex)
		if ep, ok := idx.Endpoint(rec.Iface); ok {
			rec.Endpoint, rec.Namespace, rec.Pod = ep.Key, ep.Namespace, ep.Pod
		}
	}
	if f, ok := ParseFlow(p.Payload); ok {
		rec.Src, rec.Dst, rec.Proto = f.Src.String(), f.Dst.String(), ProtoName(f.Proto)
		rec.SrcPort, rec.DstPort, rec.Fragment = f.SrcPort, f.DstPort, f.Fragment
		if f.ICMPType >= 0 {
			t, c := f.ICMPType, f.ICMPCode
			rec.ICMPType, rec.ICMPCode = &t, &c
		}
	}
	return rec
}
