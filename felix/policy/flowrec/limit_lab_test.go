package flowrec_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/internal/testenv"
)

// TestFlowTracePastMarkLimit: with each rule's flow mark limited to 1
// a second, a burst of new connections gets the verdicts of the rules
// that decide them all the same (allowed by the NetworkPolicy's rule 0
// after tier security's Pass, denied by its rule 1), and the
// collector records them as the kernel decided them: the marked ones
// with the trace naming the deciding rule, the allowed ones past the
// limit as allowed (conntrack saw them) with an unknown ingress
// trace, never as denied; every allowed connection is counted, and
// the denied ones past the limit are not recorded (no conntrack
// entry, no mark: docs/flows.md).
func TestFlowTracePastMarkLimit(t *testing.T) {
	l := newFlowLab(t, func(lc *policy.LogConfig) { lc.FlowRate = 1 })
	a, b := l.pods["a"], l.pods["b"]
	const conns = 8
	for i := range conns {
		// An allowed connection must answer before TCP's first SYN
		// retransmit (1 s), which a wrongly dropped SYN would need.
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080, SrcPort: 45000 + i, Timeout: 700 * time.Millisecond}, true, fmt.Sprintf("allowed connection %d", i))
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 9090, SrcPort: 45100 + i, Timeout: 150 * time.Millisecond}, false, fmt.Sprintf("denied connection %d", i))
	}
	allowed := match(a.IPv4, b.IPv4, "TCP", 8080)
	// Every allowed connection is recorded (within the 10 s goal).
	var started uint64
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		started = 0
		for _, f := range l.flows(allowed) {
			started += f.Started
		}
		if started < conns {
			return fmt.Sprintf("%d allowed connections recorded as started, want %d", started, conns)
		}
		return ""
	})
	if started != conns {
		t.Errorf("%d allowed connections recorded as started, want %d", started, conns)
	}
	l.waitFlow("an allowed flow with its trace", func(f *flowrec.Flow) bool {
		return allowed(f) && f.Ingress != nil && f.Ingress.Verdict == flowrec.Allow
	})
	l.waitFlow("a denied flow with its trace", func(f *flowrec.Flow) bool {
		return match(a.IPv4, b.IPv4, "TCP", 9090)(f) && f.Verdict == flowrec.Deny
	})
	var traced, untraced, denied uint64
	for _, f := range l.flows(allowed) {
		if f.Verdict != flowrec.Allow || f.Ingress == nil {
			t.Errorf("a connection the kernel allowed recorded as %s: ingress %s", f.Verdict, steps(f.Ingress))
			continue
		}
		switch f.Ingress.Verdict {
		case flowrec.Allow:
			traced += f.Started
			if steps(f.Ingress) != "allow[Pass:gnp:security.guardpolicy rule Allow:np:prod/webpolicy rule]" || f.Ingress.Decider().ID != "pi-np:prod/web/0" {
				t.Errorf("allowed flow with a trace: ingress %s, decider %s", steps(f.Ingress), f.Ingress.Decider().ID)
			}
		case flowrec.Unknown:
			untraced += f.Started
		default:
			t.Errorf("a connection the kernel allowed has the ingress trace %s", steps(f.Ingress))
		}
	}
	for _, f := range l.flows(match(a.IPv4, b.IPv4, "TCP", 9090)) {
		if d := f.Ingress.Decider(); f.Verdict != flowrec.Deny || d.ID != "pi-np:prod/web/1" || d.Action != "Deny" {
			t.Errorf("denied flow: verdict %s, ingress %s", f.Verdict, steps(f.Ingress))
		}
		denied += f.Denied
	}
	if traced == 0 || untraced == 0 || denied == 0 || denied >= conns {
		t.Errorf("%d allowed connections with a trace, %d without, %d denied ones marked of %d: want some of each, and fewer denied marks than connections (the limit held)", traced, untraced, denied, conns)
	}
	t.Logf("allowed: %d traced, %d untraced; denied: %d of %d marked", traced, untraced, denied, conns)
}

// flows are the aggregated flows of every batch so far that want
// accepts.
func (l *flowLab) flows(want func(f *flowrec.Flow) bool) []flowrec.Flow {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []flowrec.Flow
	for _, b := range l.batches {
		for i := range b.Flows {
			if want(&b.Flows[i]) {
				out = append(out, b.Flows[i])
			}
		}
	}
	return out
}
