package policy_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestFlowMarkPastLimitKeepsVerdict: with flow marks on and limited to
// 1 a second, many more new connections (policy.FlowMarkModel) than the limit marks, each
// from a source port of its own, all get the verdict of the rule that
// decides them: Allow (a named port's nftables rule), Deny, a
// tier's Pass (to the next tier) and a profile's Pass (to the next
// profile), each placed so that a packet falling through it would get
// the opposite verdict. Explain agrees with every one; the deciding
// rules' counters count every connection, and their marks name them,
// fewer than the connections (the limit held). A restarted Manager
// with the same configuration writes nothing; one with flows off
// removes every tail and mark (one transaction per family) and the
// verdicts stay.
func TestFlowMarkPastLimitKeepsVerdict(t *testing.T) {
	l := newLabWithLogConfig(t, policy.LogConfig{Group: 7, FlowGroup: 8, FlowRate: 1})
	marks := l.nflogRecords(t, 8)
	l.load(policy.FlowMarkModel)
	l.apply()

	cases := []struct {
		what  string
		p     probe
		rules []string // the deciding rule and the Passes on the way
	}{
		{"Allow (named port)", pass("a", "b", "tcp", 8080), []string{"pi-gnp:gate.b/1"}},
		{"Deny", drop("a", "b", "tcp", 9090), []string{"pi-gnp:gate.b/0"}},
		{"Pass and profile Pass", pass("a", "b", "udp", 5353), []string{"pi-gnp:gate.b/2", "pro-kns.prod/0"}},
	}
	const conns = 10
	sent := map[string]int{}
	for _, v6 := range []bool{false, true} {
		for i := range conns {
			for k, c := range cases {
				p := c.p
				p.v6, p.srcPort = v6, 44000+100*k+i
				// An allowed connection must answer before TCP's
				// first SYN retransmit (1 s), which a wrongly dropped
				// SYN would need; a drop is concluded sooner.
				timeout := 700 * time.Millisecond
				if !p.want {
					timeout = 150 * time.Millisecond
				}
				what := fmt.Sprintf("%s, connection %d, v6=%v", c.what, i, v6)
				polab.Expect(t, l.ns(p.from).NS, polab.Probe{Proto: p.proto, Dst: l.ns(p.to).Addr(v6), Port: p.port, SrcPort: p.srcPort, Timeout: timeout}, p.want, what)
				if x := l.m.Explain(l.flow(p)); x.Allowed() != p.want {
					t.Errorf("%s: explain says allowed=%v (egress %+v, ingress %+v)", what, x.Allowed(), x.Egress, x.Ingress)
				}
				for _, id := range c.rules {
					sent[id]++
				}
			}
		}
	}

	got := map[string]int{}
	for quiet := time.After(time.Second); quiet != nil; {
		select {
		case r := <-marks:
			got[r.RuleID]++
		case <-quiet:
			quiet = nil
		}
	}
	cs, err := l.m.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range sent {
		if got[id] == 0 || got[id] >= n {
			t.Errorf("rule %s: %d flow marks for %d connections, want 1 to %d (limited to 1 a second a family)", id, got[id], n, n-1)
		}
		if cs[id].Packets < uint64(n) {
			t.Errorf("rule %s: counter %d packets for %d connections", id, cs[id].Packets, n)
		}
	}
	t.Logf("connections by rule %v, flow marks %v", sent, got)

	// A restarted felix with the same model writes nothing; one with
	// flows off takes the tails out, a transaction per family, and the
	// verdicts stay.
	for _, c := range []struct {
		lc     policy.LogConfig
		writes int
	}{{policy.LogConfig{Group: 7, FlowGroup: 8, FlowRate: 1}, 0}, {policy.LogConfig{Group: 7}, 2}} {
		m, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: l.node.Fd}, Log: c.lc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		l.m = m
		l.load(baseModel)
		l.load(policy.FlowMarkModel)
		for _, ep := range l.eps {
			if err := m.SetEndpoint(ep); err != nil {
				t.Fatal(err)
			}
		}
		l.apply()
		if m.Writes() != c.writes {
			t.Errorf("restarted with flow group %d: %d writes, want %d", c.lc.FlowGroup, m.Writes(), c.writes)
		}
	}
	out, err := exec.Command("nsenter", "--net="+l.node.Path(), "nft", "list", "ruleset").CombinedOutput()
	if err != nil || strings.Contains(string(out), "fm-") || strings.Contains(string(out), `"F `) {
		t.Errorf("flows off: nft list ruleset (%v) still has flow marks:\n%s", err, out)
	}
	l.expect("flows off", append(append(both(pass("a", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090))...), both(pass("a", "b", "udp", 5353))...)...)
}
