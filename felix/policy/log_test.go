package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// waitPrefix waits for an nflog line starting with prefix.
func waitPrefix(t *testing.T, ch <-chan string, prefix string) {
	t.Helper()
	deadline := time.After(3 * time.Second)
	var seen []string
	for {
		select {
		case p := <-ch:
			if strings.HasPrefix(p, prefix) {
				return
			}
			seen = append(seen, p)
		case <-deadline:
			t.Errorf("no nflog line starting %q within 3s (saw %q)", prefix, seen)
			return
		}
	}
}

// TestLogToNFLOG: a Log rule and, with drop logging on, the drop at a
// tier's end reach nflog with prefixes naming the tier, policy,
// direction and rule, or the endpoint and where it was dropped.
func TestLogToNFLOG(t *testing.T) {
	l := newLabWithLog(t, true)
	logs := polab.NFLOG(t, l.node.NS, 7)
	l.load(gnpOnB("logged", `[{action: Log, protocol: TCP}, {action: Allow, protocol: TCP, destination: {ports: [8080]}}]`))
	l.apply()
	l.expect("logged and allowed", pass("a", "b", "tcp", 8080))
	waitPrefix(t, logs, "P default|logged|ingress|0")
	l.expect("logged and dropped", drop("a", "b", "tcp", 9090))
	waitPrefix(t, logs, "D ingress tier default")
}
