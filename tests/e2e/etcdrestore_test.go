package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// TestEtcdRestoreFromSnapshot restores the 3-member cluster from a
// snapshot taken before some pods started (and before one was deleted),
// into a new etcd cluster whose revision went back, and follows what
// docs/etcd-restore.md tells an operator to run: every node holds (its
// pods keep forwarding, new pods are refused on it), `ipam check
// --local-node` names what the snapshot lost, `ipam reimport` puts one
// node's pods back by hand, `datastore reinit` lets the nodes follow
// the datastore again, each first putting back the pods it runs; one
// node's routed is killed and restarted in between, and still puts its
// pods back. No ping is lost, no live address is released or handed out
// twice.
func TestEtcdRestoreFromSnapshot(t *testing.T) {
	l := startLabWith(t, func(tp *lab.Topology) { tp.EtcdMembers = 3; tp.CNIViaRouted = true })
	ctx := context.Background()
	n := l.Topo.Nodes
	old := mustPod(t, l, n[1].Name, "r-old") // subnet a
	gone := mustPod(t, l, n[1].Name, "r-gone")
	snap := filepath.Join(l.Dir, "etcd-backup.db")
	snapRev, err := l.SnapshotEtcd(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	// After the snapshot: two pods start, one is deleted.
	lost1 := mustPod(t, l, n[1].Name, "r-new1") // same node as old
	lost2 := mustPod(t, l, n[3].Name, "r-new2") // subnet b
	if err := l.DelPod(ctx, gone); err != nil {
		t.Fatal(err)
	}
	reach(t, l, old, lost2.IP)
	reach(t, l, lost2, lost1.IP)

	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	pings := make(chan lab.PingResult, 2)
	go func() { pings <- l.PingStream(pctx, old, lost2.IP, 100*time.Millisecond) }()
	go func() { pings <- l.PingStream(pctx, lost2, lost1.IP, 100*time.Millisecond) }()

	if err := l.RestoreEtcd(ctx, snap, "restored-1"); err != nil {
		t.Fatal(err)
	}
	restoredAt := time.Now()
	sts, _ := l.EtcdStatuses(ctx)
	t.Logf("%s restored a snapshot taken at revision %d: members now %+v", clock(restoredAt), snapRev, sts)

	// Every node notices and holds, saying why.
	for _, nd := range n {
		waitReadiness(t, l, nd.Name, "went back in time", 90*time.Second)
	}
	t.Logf("every node holds %v after the restore", time.Since(restoredAt).Round(time.Millisecond))

	// routed on the node of lost2 is killed and started again while the
	// datastore is restored: the new process has never trusted it, and
	// knows the node's pods from the view the old one saved.
	killedAt := time.Now()
	l.StopNode(n[3].Name, true)
	if err := l.StartNode(ctx, n[3].Name); err != nil {
		t.Fatal(err)
	}
	waitReadiness(t, l, n[3].Name, "went back in time", 90*time.Second)
	t.Logf("%s routed on %s killed, started again, and by %s it holds", clock(killedAt), n[3].Name, clock(time.Now()))

	// New pods are refused while a node holds: their address could be
	// one a lost pod has.
	if p, err := l.AddPod(ctx, n[1].Name, "r-refused"); err == nil {
		t.Errorf("CNI ADD on a held node succeeded (%s): a lost pod's address could be handed out twice", p.IP)
	} else {
		t.Logf("CNI ADD on held %s refused: %v", n[1].Name, err)
	}

	// ipam check on each node names what the snapshot lost there.
	out, err := l.NodeCtl(ctx, n[1].Name, "ipam", "check", "--local-node")
	t.Logf("ipam check --local-node on %s: %v\n%s", n[1].Name, err, out)
	for _, want := range []string{lost1.IP, gone.IP, "not in the datastore", "not running here"} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("ipam check on %s: want exit 1 and %q named", n[1].Name, want)
		}
	}
	if strings.Contains(out, old.IP) {
		t.Errorf("ipam check on %s names %s, which the snapshot holds", n[1].Name, old.IP)
	}
	out, err = l.NodeCtl(ctx, n[3].Name, "ipam", "check", "--local-node")
	if err == nil || !strings.Contains(out, lost2.IP) {
		t.Errorf("ipam check --local-node on %s: want exit 1 naming %s; %v\n%s", n[3].Name, lost2.IP, err, out)
	}

	// The operator puts one node's pods back by hand...
	out, err = l.NodeCtl(ctx, n[1].Name, "ipam", "reimport")
	t.Logf("ipam reimport on %s: %v\n%s", n[1].Name, err, out)
	if err != nil {
		t.Fatalf("ipam reimport on %s: %v", n[1].Name, err)
	}
	if out, err := l.NodeCtl(ctx, n[1].Name, "ipam", "reimport", "--dry-run"); err != nil {
		t.Errorf("ipam reimport --dry-run after the reimport on %s: %v\n%s", n[1].Name, err, out)
	}
	// ...and accepts the restored datastore; the other nodes put theirs
	// back by themselves before they follow it.
	t.Logf("%s datastore reinit", clock(time.Now()))
	if out, err := l.Ctl(ctx, "datastore", "reinit"); err != nil {
		t.Fatalf("datastore reinit: %v\n%s", err, out)
	}
	for _, nd := range n {
		waitReadiness(t, l, nd.Name, "", 90*time.Second)
	}
	t.Logf("%s every node ready %v after the restore", clock(time.Now()), time.Since(restoredAt).Round(time.Millisecond))

	// Nothing lost: the datastore holds every live pod, the pods kept
	// their routes and pings, and a new pod gets a free address.
	ipamClean(t, l, "after the reimport")
	for _, nd := range []string{n[1].Name, n[3].Name} {
		if out, err := l.NodeCtl(ctx, nd, "ipam", "check", "--local-node"); err != nil {
			t.Errorf("ipam check --local-node on %s after the reinit: %v\n%s", nd, err, out)
		}
	}
	fresh := mustPod(t, l, n[1].Name, "r-fresh")
	for _, p := range []lab.Pod{old, lost1, lost2} {
		if fresh.IP == p.IP {
			t.Errorf("a new pod got %s, the address of live pod %s", fresh.IP, p.Name)
		}
	}
	reach(t, l, fresh, lost1.IP)
	reach(t, l, fresh, lost2.IP)
	time.Sleep(2 * time.Second) // pacing: the pings go on 2 s past the last step before they are counted
	pcancel()
	for i := 0; i < 2; i++ {
		r := <-pings
		t.Logf("pings across the restore: %s", r)
		if r.Lost() > 0 || r.Sent < 50 {
			t.Errorf("pings across the restore: %s; want none lost", r)
		}
	}
}

// waitReadiness waits until node's readiness is 503 with a body naming
// want, or (want "") 200.
func waitReadiness(t *testing.T, l *lab.Lab, node, want string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, 500*time.Millisecond, func() string {
		code, body, err := l.NodeProbe(context.Background(), node, "/readiness")
		if err == nil && ((want == "" && code == http.StatusOK) || (want != "" && code != http.StatusOK && strings.Contains(body, want))) {
			return ""
		}
		return fmt.Sprintf("readiness of %s: %d %q (%v); want %q", node, code, body, err, want)
	})
}

// clock is a time of day in the form the ping streams name lost probes
// with, so a lost probe can be placed among the test's steps.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
