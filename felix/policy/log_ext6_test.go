package policy_test

import (
	"testing"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestLogIPv6DestinationOptions: real IPv6 TCP connections from pod a
// to pod b whose every packet carries a Destination Options header go
// through b's policy as TCP with their port (nftables walks the header),
// and the policy log records them as TCP with that port: the Log rule's
// record for an allowed connection to 8080 and the drop record for one
// to 9090 (before, both were recorded as protocol 60, port 0).
func TestLogIPv6DestinationOptions(t *testing.T) {
	l := newLabWithLog(t, true)
	logs := l.logRecords(t)
	sent8080 := polab.CountDstOpts(t, l.pods["a"].NS, 8080)
	sent9090 := polab.CountDstOpts(t, l.pods["a"].NS, 9090)
	l.load(gnpOnB("ext6", `[{action: Log, protocol: TCP, destination: {ports: [8080]}}, {action: Allow, protocol: TCP, destination: {ports: [8080]}}]`))
	l.apply()
	a, b := l.pods["a"].IPv6, l.pods["b"].IPv6

	if !polab.DialDstOpts(t, l.pods["a"].NS, b, 8080, 41239) {
		t.Fatal("TCP to 8080 with destination options: no echo (the policy allows TCP 8080)")
	}
	if n := sent8080(); n == 0 {
		t.Fatal("no packet to 8080 left pod a with a destination options header")
	}
	r := waitRecord(t, logs, "the Log rule for TCP 8080", func(r flowlog.Record) bool {
		return r.Verdict == "log" && r.Src == a.String() && r.SrcPort == 41239
	})
	if r.Proto != "TCP" || r.DstPort != 8080 || r.Dst != b.String() || r.Policy != "gnp:ext6" || r.Rule != 0 || r.Fragment {
		t.Errorf("Log rule record of a TCP SYN behind destination options: %+v", r)
	}

	if polab.DialDstOpts(t, l.pods["a"].NS, b, 9090, 41240) {
		t.Fatal("TCP to 9090 with destination options was answered (the policy allows only 8080)")
	}
	if n := sent9090(); n == 0 {
		t.Fatal("no packet to 9090 left pod a with a destination options header")
	}
	r = waitRecord(t, logs, "the drop of TCP 9090", func(r flowlog.Record) bool {
		return r.Verdict == "drop" && r.Src == a.String() && r.SrcPort == 41240
	})
	if r.Proto != "TCP" || r.DstPort != 9090 || r.Kind != "tier end" || r.Direction != "ingress" {
		t.Errorf("drop record of a TCP SYN behind destination options: %+v", r)
	}
}
