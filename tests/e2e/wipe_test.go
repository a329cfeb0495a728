package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// waitProbe polls every node's /readiness until want says yes.
func waitProbe(t *testing.T, l *lab.Lab, what string, want func(code int, body string) bool) {
	t.Helper()
	ctx := context.Background()
	for _, n := range l.Topo.Nodes {
		testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
			code, body, err := l.NodeProbe(ctx, n.Name, "/readiness")
			if err != nil || !want(code, body) {
				return fmt.Sprintf("%s: %s: /readiness %d %v\n%s", n.Name, what, code, err, body)
			}
			return ""
		})
	}
}

// TestDatastoreWipeKeepsTheDataplane reproduces the fault (etcd replaced
// by an empty one: every pod route was removed within ~7 s, /readiness
// stayed 200, ipam check found nothing) and checks the fix: nodes hold
// their routes, readiness says why, ipam check reports it; once the
// datastore is restored they resume, also a node whose routed was
// restarted while the datastore was empty.
func TestDatastoreWipeKeepsTheDataplane(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n := l.Topo.Nodes
	p1 := mustPod(t, l, n[0].Name, "w1")
	p3 := mustPod(t, l, n[2].Name, "w3")
	p4 := mustPod(t, l, n[3].Name, "w4")
	reach(t, l, p1, p3.IP)
	saved := filepath.Join(t.TempDir(), "etcd-saved")
	// What felix programmed (protocol 82), per node, before the wipe.
	programmed := func() map[string]string {
		out := map[string]string{}
		for _, node := range n {
			routes, err := l.NodeRoutes(ctx, node.Name)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, line := range strings.Split(routes, "\n") {
				if strings.Contains(line, "proto 82") {
					lines = append(lines, line)
				}
			}
			sort.Strings(lines)
			out[node.Name] = strings.Join(lines, "\n")
		}
		return out
	}
	before := programmed()

	var frozenFor time.Duration
	res := pingDuring(t, l, p1, p3.IP, func() {
		if err := l.SwapEtcdData(ctx, saved, ""); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitProbe(t, l, "after the wipe", func(code int, body string) bool {
			return code == 503 && strings.Contains(body, "no cluster identity")
		})
		t.Logf("every node's readiness said why within %s of the wipe", time.Since(start).Round(time.Millisecond))
		// A routed restarted meanwhile starts on the empty datastore: it
		// must come up holding, not tear down or re-create anything.
		l.StopNode(n[2].Name, false)
		if err := l.StartNode(ctx, n[2].Name); err != nil {
			t.Fatal(err)
		}
		waitProbe(t, l, "after restarting "+n[2].Name+"'s routed on the wiped datastore", func(code int, body string) bool {
			return code == 503 && strings.Contains(body, "no cluster identity")
		})
		// Hold for a while with pings flowing: nothing may be torn down.
		time.Sleep(8 * time.Second) // not a poll: a span of time (the fault took ~7 s to tear routes down); every node already said it holds
		frozenFor = time.Since(start)
	})
	t.Logf("empty datastore for %s: pings %s", frozenFor.Round(time.Second), res)
	if res.Sent == 0 || res.Lost() != 0 {
		t.Errorf("pod traffic lost while the datastore was empty: %s", res)
	}
	kept := 0
	for node, after := range programmed() {
		if after != before[node] || after == "" {
			t.Errorf("%s: programmed routes changed while the datastore was empty:\nbefore:\n%s\nafter:\n%s", node, before[node], after)
			continue
		}
		kept += strings.Count(after, "\n") + 1
	}
	t.Logf("programmed routes kept on the empty datastore: %d, on %d nodes", kept, len(n))
	out, err := l.Ctl(ctx, "ipam", "check")
	if err == nil || !strings.Contains(out, "no cluster identity") {
		t.Errorf("ipam check on the empty datastore: %v\n%s", err, out)
	}

	// Restore: the nodes resume by themselves.
	if err := l.SwapEtcdData(ctx, "", saved); err != nil {
		t.Fatal(err)
	}
	waitProbe(t, l, "after the restore", func(code int, body string) bool { return code == 200 })
	// The node restarted during the wipe has its BGP sessions back.
	if err := l.WaitNodeReady(ctx, n[2].Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	reach(t, l, p3, p1.IP)
	reach(t, l, p1, p4.IP)
}
