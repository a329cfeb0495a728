package policy

import (
	"slices"
	"testing"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// FlowMarkModel (shared with the lab test TestFlowMarkPastLimitKeepsVerdict):
// b's ingress in tier gate denies 9090, allows 9090 and the named port
// http (8080), passes UDP 5353 and denies the rest, so that a packet
// falling through any of its first three rules gets the opposite
// verdict; tier default's policy allows UDP 5353 (then logs, and the
// tier ends with its drop). a's egress (no policy) is its profiles:
// kns.prod passes UDP 5353 and denies it next, then ksa.prod.sa-a
// allows UDP; past the profiles, a drop.
const FlowMarkModel = `
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: gate}
spec: {order: 50}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: gate.b}
spec:
  tier: gate
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - {action: Deny, protocol: TCP, destination: {ports: [9090]}}
  - {action: Allow, protocol: TCP, destination: {ports: [9090, http]}}
  - {action: Pass, protocol: UDP, destination: {ports: [5353]}}
  - {action: Deny}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: after}
spec: {selector: app == 'b', types: [Ingress], ingress: [{action: Allow, protocol: UDP, destination: {ports: [5353]}}, {action: Log}]}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec:
  egress: [{action: Pass, protocol: UDP, destination: {ports: [5353]}}, {action: Deny, protocol: UDP, destination: {ports: [5353]}}, {action: Allow}]
  ingress: [{action: Allow}]
  labelsToApply: {pcns.env: prod}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: ksa.prod.sa-a}
spec: {labelsToApply: {pcsa.role: frontend}, egress: [{action: Allow, protocol: UDP}]}
`

// renderFlowMarkModel is the chains a calculator with lc writes for
// FlowMarkModel and two local pods, a and b.
func renderFlowMarkModel(t *testing.T, lc LogConfig) map[string][]nftdp.Rule {
	t.Helper()
	s := newRecSink()
	c := NewCalc(s, lc)
	d, err := api.Decode([]byte(FlowMarkModel))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		if err := c.SetResource(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b"} {
		c.SetEndpoint(Endpoint{Key: "ep-" + n, Iface: "cali" + n, Local: true, Node: "node", Namespace: "prod", ServiceAccount: "sa-" + n,
			Labels: map[string]string{"app": n}, Profiles: []string{"kns.prod", "ksa.prod.sa-" + n}, Ports: []NamedPort{{Name: "http", Proto: 6, Port: 8080}}})
	}
	return s.chains
}

// TestFlowMarksOnlyAddLogs: flow marks change nothing in the chains
// but a log on each deciding rule (Allow, Deny, Pass, a profile's
// Pass, a tier's and the profiles' end drop), every nftables rule of
// one policy rule with the same one: no rule is added or moved, IDs,
// counters and matches stay, so counters and Explain read what they
// read without flows. Off, no verdict rule logs.
func TestFlowMarksOnlyAddLogs(t *testing.T) {
	off := renderFlowMarkModel(t, LogConfig{Group: 7, Drops: true})
	on := renderFlowMarkModel(t, LogConfig{Group: 7, Drops: true, FlowGroup: 8, FlowRate: 50})
	if len(on) != len(off) {
		t.Fatalf("%d chains with flow marks, %d without", len(on), len(off))
	}
	marked := map[nftdp.Action]int{}
	for name, rs := range off {
		got := on[name]
		if len(got) != len(rs) {
			t.Errorf("chain %s: %d rules with flow marks, %d without", name, len(got), len(rs))
			continue
		}
		for i, r := range rs {
			if r.Action != nftdp.ActLog && r.LogGroup != 0 {
				t.Errorf("chain %s rule %d: flows off, a %s rule logs to group %d", name, i, r.Action, r.LogGroup)
			}
			g := got[i]
			deciding := r.ID != "" && slices.Contains([]nftdp.Action{nftdp.ActAccept, nftdp.ActDrop, nftdp.ActPass, nftdp.ActReturn}, r.Action)
			if deciding {
				if g.LogGroup != 8 || g.LogRate != 50 || g.LogPrefix != "F "+ruleToken(r.ID) {
					t.Errorf("chain %s rule %d (%s %s): log %d/%d %q, want group 8, rate 50, prefix %q", name, i, r.ID, r.Action, g.LogGroup, g.LogRate, g.LogPrefix, "F "+ruleToken(r.ID))
				}
				marked[r.Action]++
				g.LogGroup, g.LogRate, g.LogPrefix = 0, 0, ""
			}
			if g.ID != r.ID || g.Action != r.Action || g.Counter != r.Counter || g.Proto != r.Proto || g.IfPassClear != r.IfPassClear ||
				!slices.Equal(g.Dst.Ports, r.Dst.Ports) || g.Dst.NamedPortSet != r.Dst.NamedPortSet || !slices.Equal(g.Src.Sets, r.Src.Sets) ||
				g.LogGroup != r.LogGroup || g.LogPrefix != r.LogPrefix {
				t.Errorf("chain %s rule %d: with flow marks %+v, without %+v", name, i, got[i], r)
			}
		}
	}
	// Allow: 9090 and http (two rules), tier default's, the profiles';
	// Drop: the Deny rules, tier ends and the profiles' ends; Pass;
	// Return (the profile's Pass).
	for _, a := range []nftdp.Action{nftdp.ActAccept, nftdp.ActDrop, nftdp.ActPass, nftdp.ActReturn} {
		if marked[a] == 0 {
			t.Errorf("no %s rule marked: %v", a, marked)
		}
	}
	t.Logf("marked rules by action: %v", marked)
}
