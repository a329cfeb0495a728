package demo

import (
	"strings"
	"testing"
)

// TestSplitBounded: only the plugin's own bound on a wait for an absent
// routed (routed running for less than policy_setup_timeout_seconds of
// the wait) is set apart; a timeout with routed running the whole budget,
// the kubelet's own errors and anything else stay failures. The lines
// are shaped as the scale-up's jsonpath prints kubelet events.
func TestSplitBounded(t *testing.T) {
	const pre = `burst-1.18 x1 2026-12-02T16:23:01Z: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "ab12": plugin type="routed-cni" failed (add): routed-cni: network policy not programmed: felix did not program cali0123456789a for pod default/burst-1 `
	lines := []string{
		pre + `within 1m40s, 0s of it with routed running (policy_setup_timeout_seconds 30; an ADD waits at most 1m40s while routed is away): nothing accepted on routed's CNI socket /var/run/routed/cni.sock: is routed's pod on this node starting, or does routed serve another socket (its --cni-socket)?`,
		pre + `within 1m40s, 12s of it with routed running (policy_setup_timeout_seconds 30; an ADD waits at most 1m40s while routed is away): routed was away 1m28s of the wait (its CNI socket /var/run/routed/cni.sock did not accept), and once back did not program the interface: see routed's log`,
		// routed ran for the whole policy timeout and did not program:
		pre + `within 1m40s, 31s of it with routed running (policy_setup_timeout_seconds 30; an ADD waits at most 1m40s while routed is away): routed was away 1m9s of the wait (its CNI socket /var/run/routed/cni.sock did not accept), and once back did not program the interface: see routed's log`,
		pre + `within 30s (policy_setup_timeout_seconds): routed runs on this node (its CNI socket accepts) but has not programmed the interface: see routed's log`,
		`burst-2.18 x3 2026-12-02T16:23:05Z: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "burst-2_default_x_0": name "burst-2_default_x_0" is reserved for "cd34"`,
		`burst-3.18 x1 2026-12-02T16:23:09Z: Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded`,
	}
	bounded, other := splitBounded(lines)
	if len(bounded) != 2 || bounded[0] != lines[0] || bounded[1] != lines[1] {
		t.Errorf("bounded: got %d lines, want the first 2:\n%s", len(bounded), strings.Join(bounded, "\n"))
	}
	if len(other) != 4 {
		t.Errorf("other: got %d lines, want the last 4:\n%s", len(other), strings.Join(other, "\n"))
	}
}
