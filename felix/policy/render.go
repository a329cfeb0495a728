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
	// (felix/flows): every rule that decides (Allow, Deny, Pass, a
	// tier's or the profiles' end drop) is preceded by a log rule with
	// the same matches and prefix "F <token>", so the first packet of
	// each new connection names the rules that decided it. Policy
	// chains see new connections only (established traffic is accepted
	// before them), so no accepted established packet is copied.
	FlowGroup uint16
	// FlowRate limits each flow mark rule to that many packets a
	// second (0: 100); a flow past the limit is recorded without its
	// trace (felix/flows counts it).
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
			if m, ok := lc.flowMark(x); ok {
				out = append(out, m)
			}
			out = append(out, x)
		}
	}
	return out
}

// flowMark is the rule that marks a deciding rule's packets for
// felix/flows: the same matches, no counter, no ID (so counters and
// Explain see only the deciding rule), an nflog of group FlowGroup
// with prefix "F <token of the deciding rule's ID>". ok is false when
// flow marks are off or the rule decides nothing.
func (lc LogConfig) flowMark(r nftdp.Rule) (nftdp.Rule, bool) {
	if lc.FlowGroup == 0 || r.ID == "" {
		return nftdp.Rule{}, false
	}
	switch r.Action {
	case nftdp.ActAccept, nftdp.ActDrop, nftdp.ActPass, nftdp.ActReturn:
	default:
		return nftdp.Rule{}, false
	}
	m := r
	m.ID, m.Counter, m.Action = "", false, nftdp.ActLog
	m.LogGroup, m.LogRate, m.LogPrefix = lc.FlowGroup, lc.FlowRate, flowRulePrefix+ruleToken(r.ID)
	if m.LogRate == 0 {
		m.LogRate = 100
	}
	return m, true
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
