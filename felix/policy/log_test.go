package policy_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
)

// logRecords reads nflog group 7 in the lab's node namespace as routed
// does and resolves each packet against the lab's Manager.
func (l *lab) logRecords(t *testing.T) <-chan flowlog.Record { return l.nflogRecords(t, 7) }

// nflogRecords reads and resolves an nflog group's packets (the
// policy log's, or flow marks') until the test ends.
func (l *lab) nflogRecords(t *testing.T, group uint16) <-chan flowlog.Record {
	t.Helper()
	r, err := flowlog.Open(l.node.Fd, group)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan flowlog.Record, 1024)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; r.Close() })
	ifname := func(i uint32) string {
		for _, p := range l.pods {
			if l.ifindex(t, p.Iface) == i {
				return p.Iface
			}
		}
		return ""
	}
	go func() {
		defer close(done)
		_ = r.Run(ctx, func(p flowlog.Packet) {
			select {
			case out <- flowlog.Resolve(p, l.m.Index(), ifname):
			default:
			}
		}, nil)
	}()
	return out
}

// ifindex is an interface's index in the node namespace.
func (l *lab) ifindex(t *testing.T, iface string) uint32 {
	var idx uint32
	l.node.Do(t, func() error {
		i, err := net.InterfaceByName(iface)
		if err == nil {
			idx = uint32(i.Index)
		}
		return err
	})
	return idx
}

// waitRecord waits for a record that want accepts.
func waitRecord(t *testing.T, ch <-chan flowlog.Record, what string, want func(flowlog.Record) bool) flowlog.Record {
	t.Helper()
	deadline := time.After(5 * time.Second)
	var seen []flowlog.Record
	for {
		select {
		case r := <-ch:
			if want(r) {
				return r
			}
			seen = append(seen, r)
		case <-deadline:
			t.Fatalf("no log record of %s within 5s (saw %+v)", what, seen)
			return flowlog.Record{}
		}
	}
}

// TestLogToNFLOG: a Log rule and, with drop logging on, the drop at a
// tier's end reach nflog with a prefix that felix's model resolves to
// the tier, policy, direction and rule, and the record carries the
// packet's addresses, protocol and ports and the endpoint.
func TestLogToNFLOG(t *testing.T) {
	l := newLabWithLog(t, true)
	logs := l.logRecords(t)
	l.load(gnpOnB("logged", `[{action: Log, protocol: TCP}, {action: Allow, protocol: TCP, destination: {ports: [8080]}}]`))
	l.apply()
	a, b := l.pods["a"].IPv4.String(), l.pods["b"].IPv4.String()
	l.expect("logged and allowed", pass("a", "b", "tcp", 8080))
	r := waitRecord(t, logs, "the Log rule", func(r flowlog.Record) bool { return r.Verdict == "log" && r.DstPort == 8080 })
	if r.Kind != "policy rule" || r.Tier != "default" || r.Policy != "gnp:logged" || r.Rule != 0 || r.Action != "Log" ||
		r.Direction != "ingress" || r.RuleID != "pi-gnp:logged/0" || r.Src != a || r.Dst != b || r.Proto != "TCP" ||
		r.SrcPort == 0 || r.Iface != "calib" || r.Endpoint != l.eps["b"].Key || r.Namespace != "prod" {
		t.Errorf("Log rule record: %+v", r)
	}
	l.expect("logged and dropped", drop("a", "b", "tcp", 9090))
	r = waitRecord(t, logs, "the drop at the tier's end", func(r flowlog.Record) bool { return r.Verdict == "drop" && r.DstPort == 9090 })
	if r.Kind != "tier end" || r.Tier != "default" || r.Rule != -1 || r.Direction != "ingress" || r.Src != a || r.Dst != b ||
		r.Endpoint != l.eps["b"].Key || r.Prefix != "" {
		t.Errorf("drop record: %+v", r)
	}
}

// TestLogRateLimited: each logging rule is limited in the kernel: with
// a rate of 1 a second (burst 1), a quick series of new flows the rule
// matches logs only the first few, while every flow still passes; a
// second later a new flow is logged again.
func TestLogRateLimited(t *testing.T) {
	l := newLabWithLogConfig(t, policy.LogConfig{Group: 7, Rate: 1})
	logs := l.logRecords(t)
	l.load(gnpOnB("limited", `[{action: Log, protocol: UDP}, {action: Allow}]`))
	l.apply()
	const flows = 12
	start := time.Now()
	for i := range flows {
		p := pass("a", "b", "udp", 5353)
		p.srcPort = 42000 + i // a new flow each time
		l.expect("logged flow", p)
	}
	elapsed := time.Since(start)
	mine := func(r flowlog.Record) bool { return r.Policy == "gnp:limited" }
	waitRecord(t, logs, "the first limited flow", mine)
	got := 1
	// The kernel flushes nflog every 100 ms: whatever else was logged
	// arrives within a quiet half second.
	for quiet := time.After(500 * time.Millisecond); quiet != nil; {
		select {
		case r := <-logs:
			if mine(r) {
				got++
			}
		case <-quiet:
			quiet = nil
		}
	}
	// burst 1, then 1 a second
	limit := 1 + int(elapsed.Seconds()+1)
	if got == 0 || got > limit {
		t.Errorf("%d flows in %v logged %d records, want 1-%d (rate 1/s, burst 1)", flows, elapsed.Round(time.Millisecond), got, limit)
	}
	t.Logf("%d flows in %v: %d logged", flows, elapsed.Round(time.Millisecond), got)
	// A second later the limit has room again.
	time.Sleep(1200 * time.Millisecond)
	p := pass("a", "b", "udp", 5353)
	p.srcPort = 43000
	l.expect("a flow after the limit refilled", p)
	waitRecord(t, logs, "a flow after a second", func(r flowlog.Record) bool { return r.Policy == "gnp:limited" && r.SrcPort == 43000 })
}
