package policy_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestSpoofedSourceNotAdmittedBySelector: b admits UDP only from pods
// with app == 'c' (a GlobalNetworkPolicy, so c's addresses are in the
// rule's address set). Pod a puts c's addresses on its own eth0 and
// sends from them: b receives nothing of it (before the reverse-path
// check it did), the Manager's counters show the drop under
// spoofed-src/egress, and c's own datagrams on the same ports (so the
// spoofed ones would match c's conntrack entry) reach b. IPv4 and IPv6.
func TestSpoofedSourceNotAdmittedBySelector(t *testing.T) {
	l := newLab(t)
	const port, srcPort = 6161, 41616
	sink := polab.NewUDPSink(t, l.pods["b"].NS, port)
	l.load(`
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: b-only-from-c}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: UDP, source: {selector: app == 'c'}}
`)
	l.apply()
	a, b, c := l.pods["a"], l.pods["b"], l.pods["c"]
	// a resolves its IPv6 gateway from its own address first: once it
	// holds c's address its neighbour solicitations may come from that,
	// and they are dropped too.
	l.expect("before", both(pass("a", "host", "tcp", 7070))...)
	a.AddAddr(t, "eth0", c.IPv4.String()+"/32")
	a.AddAddr(t, "eth0", c.IPv6.String()+"/128")

	spoofedCount := func() uint64 {
		t.Helper()
		cs, err := l.m.Counters()
		if err != nil {
			t.Fatal(err)
		}
		return cs["spoofed-src/egress"].Packets
	}
	for _, v6 := range []bool{false, true} {
		to := netip.AddrPortFrom(b.Addr(v6), port)
		fromC := func(payload string) {
			t.Helper()
			nstest.Eventually(t, 10*time.Second, func() string {
				if src, ok := sink.Has(payload); ok {
					if src != c.Addr(v6).String() {
						return fmt.Sprintf("%s: arrived from %s, not c", payload, src)
					}
					return ""
				}
				polab.SendUDP(t, c.NS, c.Addr(v6), srcPort, to, payload)
				return payload + ": c's own datagram never reached b"
			})
		}
		fromC(fmt.Sprintf("real v6=%v", v6))
		spoofed := fmt.Sprintf("spoofed v6=%v", v6)
		before := spoofedCount()
		polab.SendUDP(t, a.NS, c.Addr(v6), srcPort, to, spoofed)
		nstest.Eventually(t, 5*time.Second, func() string {
			if src, ok := sink.Has(spoofed); ok {
				return fmt.Sprintf("%s: b received a's datagram sent from c's address %s", spoofed, src)
			}
			if n := spoofedCount(); n <= before {
				return fmt.Sprintf("%s: spoofed-src/egress still %d", spoofed, n)
			}
			return ""
		})
		fromC(fmt.Sprintf("after v6=%v", v6))
		if src, ok := sink.Has(spoofed); ok {
			t.Errorf("%s: b received a's datagram sent from c's address %s", spoofed, src)
		}
	}
}

// TestSpoofedSourceLogged: with drop logging on, a datagram pod a sends
// from pod c's address (to pod b and to the node) reaches the policy
// log through the real nflog reader as what it is: a drop of kind
// spoofed source, direction egress or to-host, on a's interface and
// endpoint, with the spoofed source and the destination, and the rule
// ID its counter has (spoofed-src/<direction>). Before the RuleIndex
// knew the prefix the record was an unknown rule (its raw prefix).
// Explain, given a as the sender, answers the same drop. IPv4 and IPv6.
func TestSpoofedSourceLogged(t *testing.T) {
	l := newLabWithLog(t, true)
	logs := l.logRecords(t)
	const port, srcPort = 6262, 41626
	l.expect("before", both(pass("a", "host", "tcp", 7070))...)
	a, b, c := l.pods["a"], l.pods["b"], l.pods["c"]
	a.AddAddr(t, "eth0", c.IPv4.String()+"/32")
	a.AddAddr(t, "eth0", c.IPv6.String()+"/128")
	for _, v6 := range []bool{false, true} {
		for _, dst := range []struct {
			name string
			addr netip.Addr
			dir  string
		}{
			{"pod b", b.Addr(v6), "egress"},
			{"the node", l.ns("host").Addr(v6), "to-host"},
		} {
			what := fmt.Sprintf("a's datagram from c's address to %s v6=%v", dst.name, v6)
			polab.SendUDP(t, a.NS, c.Addr(v6), srcPort, netip.AddrPortFrom(dst.addr, port), what)
			r := waitRecord(t, logs, what, func(r flowlog.Record) bool {
				return r.Proto == "UDP" && r.DstPort == port && r.Dst == dst.addr.String()
			})
			if r.Verdict != "drop" || r.Kind != policy.KindSpoofedSource || r.Direction != dst.dir ||
				r.RuleID != "spoofed-src/"+dst.dir || r.Action != "Deny" || r.Rule != -1 || r.Prefix != "" ||
				r.Iface != a.Iface || r.Endpoint != l.eps["a"].Key || r.Namespace != "prod" ||
				r.Src != c.Addr(v6).String() || r.SrcPort != srcPort {
				t.Errorf("%s: record %+v", what, r)
			}
		}
		// Explain, told that a sends, names the same drop, whose kernel
		// counter has counted the datagram to b.
		x := l.m.Explain(policy.Flow{Src: c.Addr(v6), Dst: b.Addr(v6), Proto: 17, SrcPort: srcPort, DstPort: port,
			ICMPType: -1, ICMPCode: -1, From: l.eps["a"].Key})
		cs, err := l.m.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if x.Allowed() || x.Egress.Rule.Kind != policy.KindSpoofedSource || x.Egress.Rule.ID != "spoofed-src/egress" ||
			cs[x.Egress.Rule.ID].Packets == 0 || x.Ingress.Rule.Kind != policy.KindNotReached {
			t.Errorf("explain of a's datagram from c's address v6=%v: %+v (kernel counter %+v)", v6, x, cs[x.Egress.Rule.ID])
		}
	}
}
