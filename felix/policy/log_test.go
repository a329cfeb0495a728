package policy_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// logRecords reads nflog group 7 in the lab's node namespace as routed
// does and resolves each packet against the lab's Manager.
func (l *lab) logRecords(t *testing.T) <-chan flowlog.Record {
	t.Helper()
	r, err := flowlog.Open(l.node.Fd, 7)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan flowlog.Record, 64)
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
