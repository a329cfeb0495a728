package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/tests/lab"
)

// TestAddWaitsForRoutedRestart: a pod created while routed is away from
// its node (its DaemonSet pod restarting, a new image being pulled) for
// longer than policy_setup_timeout_seconds does not fail its sandbox:
// the plugin does the ADD itself, waits for the new routed to program
// the pod's interface (time without routed does not count against the
// timeout), and the pod is reachable across nodes once ADD returns;
// once with routed stopped (its socket removed), once killed -9 (its
// socket left behind, refusing connections).
func TestAddWaitsForRoutedRestart(t *testing.T) {
	const timeout = 2 // seconds
	l := startLabWith(t, func(tp *lab.Topology) { tp.CNIViaRouted = true; tp.PolicySetupTimeout = timeout })
	ctx := context.Background()
	n := l.Topo.Nodes
	peer := mustPod(t, l, n[1].Name, "aw-peer")

	for _, kill := range []bool{false, true} {
		how, name := "stopped (SIGTERM)", "aw-late-term"
		if kill {
			// kill -9 leaves the socket file behind, refusing connections.
			how, name = "killed (-9)", "aw-late-kill"
		}
		t.Logf("routed on %s %s", n[2].Name, how)
		l.StopNode(n[2].Name, kill)
		type added struct {
			pod lab.Pod
			err error
			at  time.Time
		}
		done := make(chan added, 1)
		start := time.Now()
		go func() {
			p, err := l.AddPod(ctx, n[2].Name, name)
			done <- added{p, err, time.Now()}
		}()
		// routed stays away three times the timeout: the old plugin failed
		// the ADD after 2 s.
		away := 3 * timeout * time.Second
		time.Sleep(away) // not a poll: the outage the ADD must wait across
		if err := l.StartNode(ctx, n[2].Name); err != nil {
			t.Fatal(err)
		}
		var r added
		select {
		case r = <-done:
		case <-time.After(90 * time.Second):
			t.Fatalf("CNI ADD on %s still running 90 s after routed came back", n[2].Name)
		}
		if r.err != nil {
			t.Fatalf("CNI ADD started while routed was away from %s for %s (policy_setup_timeout_seconds %d): %v", n[2].Name, away, timeout, r.err)
		}
		took := r.at.Sub(start)
		t.Logf("CNI ADD started with routed away, returned %s later (%s after routed was started again)", took.Round(time.Millisecond), (took - away).Round(time.Millisecond))
		if took < away {
			t.Errorf("ADD returned after %s, before routed was started again (%s): it cannot have waited for felix", took, away)
		}
		reach(t, l, peer, r.pod.IP)
		reach(t, l, r.pod, peer.IP)
	}
	log, err := os.ReadFile(filepath.Join(l.Dir, n[2].Name, "cni.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(log), "policy programmed once routed was back on the node"); got != 2 {
		t.Errorf("the plugin's log on %s says %d times that an ADD waited for routed, want 2:\n%s", n[2].Name, got, log)
	}
}
