package flowrec

import (
	"fmt"
	"strings"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
)

// classify names a connection's class, taking a reference on it: its
// ends from the model, its traces from the kernel's marks (steps, in
// the order the kernel logged them) and whether conntrack confirmed
// it (ct: the kernel accepted the first packet). nil: no end is a pod
// of this node, so the connection is not this node's to record.
func (c *Collector) classify(k flowKey, f policy.Flow, steps []policy.RuleInfo, ct bool) *class {
	src, dst, staged := c.cfg.Model.Describe(f)
	if !src.Local && !dst.Local {
		return nil
	}
	tmpl := Flow{Src: src, Dst: dst, Proto: flowlog.ProtoName(k.proto), DstPort: k.dport, Staged: staged}
	tmpl.Egress = trace(steps, "egress", src.Local)
	denied := tmpl.Egress != nil && tmpl.Egress.Verdict == Deny
	// A packet its egress denied never met the ingress policy.
	tmpl.Ingress = trace(steps, "ingress", dst.Local && !denied)
	tmpl.Verdict = Allow
	for _, t := range []*Trace{tmpl.Egress, tmpl.Ingress} {
		switch {
		case t == nil:
		case t.Verdict == Deny:
			tmpl.Verdict = Deny
		case t.Verdict == Unknown && tmpl.Verdict != Deny && !ct:
			tmpl.Verdict = Unknown
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%d|%d|%s|%s|%s", src.id(), dst.id(), k.proto, k.dport, tmpl.Verdict, tmpl.Egress.key(), tmpl.Ingress.key())
	for _, s := range staged {
		fmt.Fprintf(&b, "|%s:%t:%s:%s", s.Policy, s.Allowed, decisionRule(s.Egress), decisionRule(s.Ingress))
	}
	key := b.String()
	cls := c.classes[key]
	if cls == nil {
		cls = &class{key: key, tmpl: tmpl}
		c.classes[key] = cls
	}
	cls.refs++
	return cls
}

func decisionRule(d *policy.Decision) string {
	if d == nil {
		return ""
	}
	return d.Rule.ID
}

// trace is one direction's trace from the marks. want says the
// direction is policed on this node; marks of a direction not wanted
// still make a trace (the model may not know a pod yet).
func trace(steps []policy.RuleInfo, dir string, want bool) *Trace {
	t := &Trace{Verdict: Unknown}
	for _, s := range steps {
		if s.Direction != dir {
			continue
		}
		t.Steps = append(t.Steps, s)
		switch s.Action {
		case "Allow":
			t.Verdict = Allow
		case "Deny":
			t.Verdict = Deny
		}
	}
	if len(t.Steps) == 0 && !want {
		return nil
	}
	return t
}
