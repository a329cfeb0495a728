package flowrec

import (
	"strconv"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
)

// classify names a connection's class, taking a reference on it: its
// ends from the model, its traces from the kernel's marks (steps, in
// the order the kernel logged them) and whether conntrack confirmed
// it (ct: the kernel accepted the first packet). noTrace says the
// nflog reader was down while the connection waited for its marks: a
// direction without its decision's mark is then NoTraceMarkReader's,
// not a mark lost on its own. nil: no end is a pod of this node, so
// the connection is not this node's to record.
//
// A VersionedModel's answers depend on a flow's addresses only while
// its version holds, so connections alike (same addresses, protocol,
// port, marks) are classified once: the memo gives the class the first
// of them got, without asking the model or building the key again.
func (c *Collector) classify(k flowKey, f policy.Flow, steps []policy.RuleInfo, ct, noTrace bool) *class {
	mk, memo := c.memo.key(c.cfg.Model, c, k, steps, ct, noTrace)
	if memo {
		if cls, hit := c.memo.m[mk]; hit {
			if cls != nil {
				cls.refs++
			}
			return cls
		}
	}
	cls := c.classifyNew(k, f, steps, ct, noTrace)
	if memo {
		c.memo.put(c, mk, cls)
	}
	return cls
}

// classifyNew is classify without the memo.
func (c *Collector) classifyNew(k flowKey, f policy.Flow, steps []policy.RuleInfo, ct, noTrace bool) *class {
	src, dst, staged := c.cfg.Model.Describe(f)
	if !src.Local && !dst.Local {
		return nil
	}
	tmpl := Flow{Src: src, Dst: dst, Proto: flowlog.ProtoName(k.proto), DstPort: k.dport, Staged: staged}
	// The traces are built on the stack and go to the heap only with
	// a new class: a connection of a known class (every one when the
	// model cannot be memoized: staged policies) allocates none.
	var eg, in Trace
	var egp, inp *Trace
	if trace(&eg, steps, "egress", src.Local) {
		egp = &eg
	}
	denied := egp != nil && egp.Verdict == Deny
	// A packet its egress denied never met the ingress policy.
	if trace(&in, steps, "ingress", dst.Local && !denied) {
		inp = &in
	}
	tmpl.Verdict = Allow
	for _, t := range [2]*Trace{egp, inp} {
		switch {
		case t == nil:
		case t.Verdict == Deny:
			tmpl.Verdict = Deny
		case t.Verdict == Unknown && tmpl.Verdict != Deny && !ct:
			tmpl.Verdict = Unknown
		}
		if t != nil && t.Verdict == Unknown && noTrace {
			tmpl.NoTrace = NoTraceMarkReader
		}
	}
	b := make([]byte, 0, 160)
	b = append(src.appendID(b), '|')
	b = append(dst.appendID(b), '|')
	b = append(strconv.AppendUint(b, uint64(k.proto), 10), '|')
	b = append(strconv.AppendUint(b, uint64(k.dport), 10), '|')
	b = append(append(b, tmpl.Verdict...), '|')
	b = egp.appendKey(b)
	b = append(b, '|')
	b = inp.appendKey(b)
	b = append(append(b, '|'), tmpl.NoTrace...)
	for _, s := range staged {
		b = append(append(b, '|'), s.Policy...)
		b = strconv.AppendBool(append(b, ':'), s.Allowed)
		b = append(append(b, ':'), decisionRule(s.Egress)...)
		b = append(append(b, ':'), decisionRule(s.Ingress)...)
	}
	cls := c.classes[string(b)]
	if cls == nil {
		key := string(b)
		if egp != nil {
			tmpl.Egress = new(Trace)
			*tmpl.Egress = eg
		}
		if inp != nil {
			tmpl.Ingress = new(Trace)
			*tmpl.Ingress = in
		}
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

// trace fills t with one direction's trace from the marks and says
// whether the flow has one. want says the direction is policed on
// this node; marks of a direction not wanted still make a trace (the
// model may not know a pod yet).
func trace(t *Trace, steps []policy.RuleInfo, dir string, want bool) bool {
	t.Verdict = Unknown
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
	return len(t.Steps) > 0 || want
}

// memoCap bounds the memo; past it the memo starts again empty.
const memoCap = 4096

// classMemo remembers the class of connections alike while the model's
// version holds. It holds a reference on each class it gives (nil
// classes, of connections not this node's, included), released when
// it starts again.
type classMemo struct {
	m       map[memoKey]*class
	version uint64
}

// memoKey is what a connection's class depends on besides the model:
// its addresses, protocol and port (or ICMP type), the marks' rules
// (IDs, actions and directions), whether conntrack confirmed it and
// whether the nflog reader was down.
type memoKey struct {
	src, dst [16]byte // as flowKey's
	v6       bool
	proto    uint8
	dport    uint16
	ct       bool
	noTrace  bool
	steps    string
}

// key is the memo's key of a connection; ok is false when the model's
// answers may depend on more than the key (it is no VersionedModel, or
// it evaluates staged policies), and the memo is left empty.
func (m *classMemo) key(model Model, c *Collector, k flowKey, steps []policy.RuleInfo, ct, noTrace bool) (memoKey, bool) {
	vm, ok := model.(VersionedModel)
	var v uint64
	if ok {
		v, ok = vm.Version()
	}
	if !ok || v != m.version {
		m.reset(c)
		m.version = v
	}
	if !ok {
		return memoKey{}, false
	}
	mk := memoKey{src: k.src, dst: k.dst, v6: k.v6, proto: k.proto, dport: k.dport, ct: ct, noTrace: noTrace}
	if len(steps) > 0 {
		b := make([]byte, 0, 64)
		for _, s := range steps {
			b = append(append(b, s.ID...), 0)
			b = append(append(b, s.Action...), 0)
			b = append(append(b, s.Direction...), 1)
		}
		mk.steps = string(b)
	}
	return mk, true
}

// put remembers cls (nil: not this node's) for mk, with a reference.
func (m *classMemo) put(c *Collector, mk memoKey, cls *class) {
	if len(m.m) >= memoCap {
		m.reset(c)
	}
	if m.m == nil {
		m.m = make(map[memoKey]*class)
	}
	if cls != nil {
		cls.refs++
	}
	m.m[mk] = cls
}

// reset empties the memo, releasing its references.
func (m *classMemo) reset(c *Collector) {
	for _, cls := range m.m {
		if cls != nil {
			c.release(cls)
		}
	}
	clear(m.m)
}
