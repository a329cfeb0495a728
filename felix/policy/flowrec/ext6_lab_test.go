package flowrec_test

import (
	"testing"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestFlowIPv6DestinationOptions: real IPv6 TCP connections whose
// every packet carries a Destination Options header are recorded as
// TCP with their port, their marks joined with conntrack's NEW: the
// allowed one to 8080 started, with its full trace (not conntrack's
// verdict with an unknown trace, as when the mark was keyed protocol
// 60, port 0), the denied one to 9090 with the Deny rule.
func TestFlowIPv6DestinationOptions(t *testing.T) {
	l := newFlowLab(t)
	a, b := l.pods["a"], l.pods["b"]
	sent8080 := polab.CountDstOpts(t, a.NS, 8080)
	sent9090 := polab.CountDstOpts(t, a.NS, 9090)
	if !polab.DialDstOpts(t, a.NS, b.IPv6, 8080, 41241) {
		t.Fatal("TCP to 8080 with destination options: no echo (b's policy allows TCP 8080)")
	}
	if polab.DialDstOpts(t, a.NS, b.IPv6, 9090, 41242) {
		t.Fatal("TCP to 9090 with destination options was answered (b's policy denies it)")
	}
	if sent8080() == 0 || sent9090() == 0 {
		t.Fatalf("packets with a destination options header: %d to 8080, %d to 9090", sent8080(), sent9090())
	}
	f := l.waitFlow("a->b tcp/8080 with destination options", match(a.IPv6, b.IPv6, "TCP", 8080))
	if f.Verdict != flowrec.Allow || f.Started == 0 || steps(f.Egress) != "allow[Allow:kns.prodprofile rule]" ||
		steps(f.Ingress) != "allow[Pass:gnp:security.guardpolicy rule Allow:np:prod/webpolicy rule]" {
		t.Errorf("a->b tcp/8080 with destination options: verdict %s started %d egress %s ingress %s",
			f.Verdict, f.Started, steps(f.Egress), steps(f.Ingress))
	}
	f = l.waitFlow("a->b tcp/9090 with destination options", match(a.IPv6, b.IPv6, "TCP", 9090))
	if d := f.Ingress.Decider(); f.Verdict != flowrec.Deny || f.Denied == 0 || d.Policy != "np:prod/web" || d.Action != "Deny" || d.Index != 1 {
		t.Errorf("a->b tcp/9090 with destination options: verdict %s denied %d ingress %s", f.Verdict, f.Denied, steps(f.Ingress))
	}
}
