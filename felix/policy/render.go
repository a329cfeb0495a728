package policy

import (
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// LogConfig says where Log rules and default drops are logged.
type LogConfig struct {
	// Group is the nflog group of Log rules (and of drop logs).
	Group uint16
	// Rate limits each logging rule to that many packets a second (0:
	// 10).
	Rate uint32
	// Drops also logs packets dropped because no rule allowed them (at
	// a tier's end or after the profiles).
	Drops bool
	// FlowGroup, when set, is the nflog group of flow verdict marks
	// (felix/policy/flowrec): every rule that decides (Allow, Deny,
	// Pass, a tier's or the profiles' end drop) also logs the packets
	// it decides with prefix "F <token>", so the first packet of each
	// new connection names the rules that decided it. The rule's
	// matches are evaluated once: it goes to a small chain that logs
	// and then gives the verdict (nftdp's tail chains). Policy chains
	// see new connections only (established traffic is accepted before
	// them), so no accepted established packet is copied.
	FlowGroup uint16
	// FlowRate limits each deciding rule's flow mark to that many
	// packets a second (0: 100); a packet past the limit gets its
	// rule's verdict without a mark, and its flow is recorded without
	// its trace (felix/policy/flowrec counts it).
	FlowRate uint32
}

// expand renders one compiled rule as nftables rules: a rule with named
// ports becomes one rule per alternative (the numeric ports, then each
// named port's set) on each side, as nftables cannot OR across sets.
// inProfile renders Pass as Return (profiles have no next tier).
func (lc LogConfig) expand(r *rule, id, logPrefix string, inProfile bool) []nftdp.Rule {
	base := nftdp.Rule{
		ID: id, IPVersion: r.ipVersion, Proto: r.proto, NotProto: r.notProto,
		ICMP: r.icmp, NotICMP: r.notICMP, Counter: true,
	}
	switch r.action {
	case api.ActionAllow:
		base.Action = nftdp.ActAccept
	case api.ActionDeny:
		base.Action = nftdp.ActDrop
	case api.ActionPass:
		base.Action = nftdp.ActPass
		if inProfile {
			base.Action = nftdp.ActReturn
		}
	case api.ActionLog:
		base.Action = nftdp.ActLog
		base.LogGroup, base.LogRate, base.LogPrefix = lc.Group, lc.rate(), logPrefix
	}
	var out []nftdp.Rule
	for _, src := range alternatives(&r.src, r.proto) {
		for _, dst := range alternatives(&r.dst, r.proto) {
			x := base
			x.Src, x.Dst = src, dst
			out = append(out, lc.flowMark(x))
		}
	}
	return out
}

// flowMark is r marking the packets it decides for
// felix/policy/flowrec: an nflog of group FlowGroup with prefix "F
// <token of r's ID>", limited to FlowRate a second, before r's verdict
// (nftdp writes it as a goto to a chain holding the limited log and
// the verdict, so r's matches are evaluated once and a packet over the
// limit still gets r's verdict). r keeps its ID and counter, which
// counters and Explain read. r is returned as it is when flow marks
// are off or r decides nothing.
func (lc LogConfig) flowMark(r nftdp.Rule) nftdp.Rule {
	if lc.FlowGroup == 0 || r.ID == "" {
		return r
	}
	switch r.Action {
	case nftdp.ActAccept, nftdp.ActDrop, nftdp.ActPass, nftdp.ActReturn:
	default:
		return r
	}
	r.LogGroup, r.LogRate, r.LogPrefix = lc.FlowGroup, lc.FlowRate, flowRulePrefix+ruleToken(r.ID)
	if r.LogRate == 0 {
		r.LogRate = 100
	}
	return r
}

func (lc LogConfig) rate() uint32 {
	if lc.Rate == 0 {
		return 10
	}
	return lc.Rate
}

// alternatives are the nftdp sides one compiled side becomes.
func alternatives(s *side, proto uint8) []nftdp.Side {
	b := nftdp.Side{Nets: s.nets, NotNets: s.notNets, NotPorts: s.notPorts}
	if s.sel != nil {
		b.Sets = []string{addrSet(s.sel).name}
	}
	if s.notSel != nil {
		b.NotSets = []string{addrSet(s.notSel).name}
	}
	for _, n := range s.notNamed {
		b.NotNamedPortSets = append(b.NotNamedPortSets, namedPortSet(s.portMatcher, proto, n).name)
	}
	if len(s.named) == 0 {
		b.Ports = s.ports
		return []nftdp.Side{b}
	}
	var out []nftdp.Side
	if len(s.ports) > 0 {
		x := b
		x.Ports = s.ports
		out = append(out, x)
	}
	for _, n := range s.named {
		x := b
		x.NamedPortSet = namedPortSet(s.portMatcher, proto, n).name
		out = append(out, x)
	}
	return out
}

// dirName is "ingress" or "egress".
func dirName(ingress bool) string {
	if ingress {
		return "ingress"
	}
	return "egress"
}
