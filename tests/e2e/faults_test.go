package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// pingDuring pings from one pod to another every 100 ms while fault runs
// (plus a second before and after), and returns the counts.
func pingDuring(t *testing.T, l *lab.Lab, from lab.Pod, to string, fault func()) lab.PingResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan lab.PingResult, 1)
	go func() { res <- l.PingStream(ctx, from, to, 100*time.Millisecond) }()
	time.Sleep(time.Second) // pacing: a second of pings before the fault
	fault()
	time.Sleep(time.Second) // pacing: and a second after it
	cancel()
	return <-res
}

// snapshot is what must not change across a fault: each pod's endpoint
// and its IPAM holder.
func snapshot(t *testing.T, l *lab.Lab) string {
	t.Helper()
	ctx := context.Background()
	weps, err := l.Ctl(ctx, "get", "workloadendpoints", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(weps)
	for _, p := range l.Pods() {
		out, err := l.Ctl(ctx, "ipam", "show", "--ip", p.IP)
		if err != nil {
			t.Fatalf("ipam show --ip %s: %v", p.IP, err)
		}
		b.WriteString(out)
	}
	return b.String()
}

func mustPod(t *testing.T, l *lab.Lab, node, name string) lab.Pod {
	t.Helper()
	p, err := l.AddPod(context.Background(), node, name)
	if err != nil {
		t.Fatalf("add pod %s on %s: %v", name, node, err)
	}
	return p
}

func reach(t *testing.T, l *lab.Lab, from lab.Pod, to string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 250*time.Millisecond, func() string {
		if got, err := l.Ping(context.Background(), from, to, 1); err != nil || got != 1 {
			return fmt.Sprintf("%s cannot reach %s: %d of 1 answered (%v)", from.Name, to, got, err)
		}
		return ""
	})
}

// TestFaults runs the faults in sequence on one lab; each step starts
// from a healthy cluster and asserts that nothing was lost.
func TestFaults(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n := l.Topo.Nodes
	p1 := mustPod(t, l, n[0].Name, "f1") // subnet a, on the route reflector
	p2 := mustPod(t, l, n[1].Name, "f2") // subnet a
	p3 := mustPod(t, l, n[2].Name, "f3") // subnet b
	p4 := mustPod(t, l, n[3].Name, "f4") // subnet b
	for _, to := range []lab.Pod{p2, p3, p4} {
		reach(t, l, p1, to.IP)
	}

	t.Run("kill -9 and restart", func(t *testing.T) {
		before := snapshot(t, l)
		res := pingDuring(t, l, p1, p3.IP, func() {
			l.StopNode(n[2].Name, true)
			time.Sleep(3 * time.Second) // not a poll: routed stays down 3 s, so the pings cross a real outage
			// The route reflector (n1) saw its client go and stays
			// ready for the others.
			rrReady := func() string {
				body, err := l.NodeHTTP(ctx, n[0].Name, 9099, "/readiness")
				if err != nil {
					return err.Error() + " " + body
				}
				if !strings.Contains(body, "route reflector: 3 of 4 sessions established") {
					return "ready without having seen the client go: " + body
				}
				return ""
			}
			// In a subtest of its own: a failure here must not stop this
			// one before the node is started again for the next steps.
			t.Run("route reflector sees the client go", func(t *testing.T) {
				testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
					if why := rrReady(); why != "" {
						return "route reflector while one client is down: " + why
					}
					return ""
				})
			})
			if err := l.StartNode(ctx, n[2].Name); err != nil {
				t.Fatal(err)
			}
			if err := l.WaitNodeReady(ctx, n[2].Name, 60*time.Second); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("kill -9 of routed on %s with pings across it: %s", n[2].Name, res)
		// Routes stay in the kernel and peers keep ours (graceful
		// restart): forwarding should not notice. Allow a little for
		// scheduling on a loaded machine, and report the number.
		if res.Sent == 0 || res.Lost() > res.Sent/20 {
			t.Errorf("too much loss across a kill -9: %s", res)
		}
		if after := snapshot(t, l); after != before {
			t.Errorf("pods' endpoints or addresses changed across the restart:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		reach(t, l, p3, p2.IP)
	})

	t.Run("SIGTERM and restart loses nothing", func(t *testing.T) {
		res := pingDuring(t, l, p2, p4.IP, func() {
			l.StopNode(n[3].Name, false)
			if err := l.StartNode(ctx, n[3].Name); err != nil {
				t.Fatal(err)
			}
			if err := l.WaitNodeReady(ctx, n[3].Name, 60*time.Second); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("graceful restart of routed on %s: %s", n[3].Name, res)
		if res.Sent == 0 || res.Lost() != 0 {
			t.Errorf("packets lost across a graceful restart: %s", res)
		}
	})

	t.Run("etcd down for 30s", func(t *testing.T) {
		before := snapshot(t, l)
		var addErr error
		var addTook time.Duration
		res := pingDuring(t, l, p1, p4.IP, func() {
			l.StopEtcd()
			time.Sleep(2 * time.Second) // not a poll: the ADD is made 2 s into the outage, not at its edge
			start := time.Now()
			_, addErr = l.AddPod(ctx, n[1].Name, "f-during-outage")
			addTook = time.Since(start)
			time.Sleep(28 * time.Second) // not a poll: the outage lasts 30 s
			if err := l.StartEtcd(ctx); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("etcd outage of 30s: pings %s; CNI ADD failed after %s: %v", res, addTook.Round(time.Millisecond), addErr)
		if res.Lost() != 0 {
			t.Errorf("the dataplane stopped forwarding while etcd was down: %s", res)
		}
		if addErr == nil || !strings.Contains(addErr.Error(), "etcd unreachable") {
			t.Errorf("CNI ADD with etcd down: want a clear 'etcd unreachable' error, got %v", addErr)
		}
		if addTook > 20*time.Second {
			t.Errorf("CNI ADD took %s to fail with etcd down", addTook)
		}
		// Nothing leaked: no extra veth on the node, no extra endpoint or address.
		links, err := l.NodeLinks(ctx, n[1].Name)
		if err != nil {
			t.Fatal(err)
		}
		if c := strings.Count(links, "cali"); c != 1 {
			t.Errorf("%s has %d cali interfaces after the failed ADD, want 1:\n%s", n[1].Name, c, links)
		}
		for _, name := range n {
			if err := l.WaitNodeReady(ctx, name.Name, 60*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if after := snapshot(t, l); after != before {
			t.Errorf("the outage changed endpoints or addresses:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		// Everything resumes: a new pod gets an address and is reachable.
		p := mustPod(t, l, n[1].Name, "f-after-outage")
		reach(t, l, p3, p.IP)
	})

	t.Run("Node record deleted under a running routed", func(t *testing.T) {
		node := n[2]
		before := snapshot(t, l)
		var back time.Duration
		res := pingDuring(t, l, p1, p3.IP, func() {
			if _, err := l.Ctl(ctx, "delete", "node", node.Name); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var out string
			testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, func() string {
				var err error
				if out, err = l.Ctl(ctx, "get", "node", node.Name, "-o", "yaml"); err != nil {
					return fmt.Sprintf("routed on %s did not re-create its Node record: %v", node.Name, err)
				}
				return ""
			})
			back = time.Since(start)
			if !strings.Contains(out, "subnet: b") || !strings.Contains(out, node.Addr.String()) {
				t.Errorf("re-created Node lost its labels or address:\n%s", out)
			}
		})
		t.Logf("Node %s deleted: re-created after %s; pings %s", node.Name, back.Round(time.Millisecond), res)
		if res.Sent == 0 || res.Lost() != 0 {
			t.Errorf("packets lost while the Node record was gone: %s", res)
		}
		if after := snapshot(t, l); after != before {
			t.Errorf("endpoints or addresses changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if err := l.WaitNodeReady(ctx, node.Name, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		reach(t, l, p2, p3.IP)
	})

	t.Run("node deleted", func(t *testing.T) {
		gone := n[3]
		blocks, err := l.Ctl(ctx, "ipam", "show", "--show-blocks")
		if err != nil {
			t.Fatal(err)
		}
		var goneBlock string
		for _, line := range strings.Split(blocks, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[2] == gone.Name {
				goneBlock = f[0]
			}
		}
		if goneBlock == "" {
			t.Fatalf("no block of %s in:\n%s", gone.Name, blocks)
		}
		// The machine dies: routed stops and its pods vanish without a
		// CNI DEL; the operator then deletes the Node.
		l.StopNode(gone.Name, true)
		l.ForgetPod(p4)
		if _, err := l.Ctl(ctx, "delete", "node", gone.Name); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 120*time.Second, 2*time.Second, func() string {
			blocks, _ := l.Ctl(ctx, "ipam", "show", "--show-blocks")
			r1, _ := l.NodeRoutes(ctx, n[0].Name)
			r3, _ := l.NodeRoutes(ctx, n[2].Name)
			if !strings.Contains(blocks, gone.Name) && !strings.Contains(r1, goneBlock) && !strings.Contains(r3, goneBlock) {
				return ""
			}
			return fmt.Sprintf("after deleting %s, its block %s is not reclaimed or still routed:\n%s\n%s:\n%s\n%s:\n%s",
				gone.Name, goneBlock, blocks, n[0].Name, r1, n[2].Name, r3)
		})
		if out, _ := l.Ctl(ctx, "ipam", "show", "--ip", p4.IP); !strings.Contains(out, "not allocated") {
			t.Errorf("the dead node's pod address %s is still allocated:\n%s", p4.IP, out)
		}
		reach(t, l, p1, p3.IP) // the rest of the cluster is fine
	})
}
