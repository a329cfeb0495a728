package flowrec_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/internal/flowaggtest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/ctl"
	"github.com/routed-net/routed/routed/flowagg"
)

// childConfig is what a node process (this test binary run again)
// needs: the lab's node namespace, its endpoints, and how to reach
// the aggregator.
type childConfig struct {
	Netns                    string
	Endpoints                []policy.Endpoint
	URL, Cert, Key, CA, File string
}

// TestMain runs the node process when asked (FLOWREC_CHILD names its
// configuration file): like a routed restarted on a node, it adopts
// the policy tables, records flows and sends them to the aggregator
// until it is killed. FLOWREC_TRAFFIC runs BenchmarkCollectorCPU's
// traffic instead.
func TestMain(m *testing.M) {
	if path := os.Getenv("FLOWREC_TRAFFIC"); path != "" {
		if err := runTraffic(path); err != nil {
			fmt.Fprintln(os.Stderr, "traffic:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv("FLOWREC_CHILD"); path != "" {
		if err := runChild(path); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(path string) error {
	var cfg childConfig
	if err := readJSON(path, &cfg); err != nil {
		return err
	}
	f, err := os.Open(cfg.Netns)
	if err != nil {
		return err
	}
	// Held open to the end: the Manager and the collector use the
	// descriptor (a file the GC finalized would close it under them).
	defer f.Close()
	fd := int(f.Fd())
	m, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: fd}, Log: policy.LogConfig{Group: 7, FlowGroup: 8}})
	if err != nil {
		return err
	}
	model := flowrec.NewLockedModel()
	if err := loadModel(m, model, cfg.Endpoints); err != nil {
		return err
	}
	if err := flowrec.EnableAccounting(fd); err != nil {
		return err
	}
	snd, err := flowagg.NewSender(flowagg.SenderConfig{URL: cfg.URL, CertFile: cfg.Cert, KeyFile: cfg.Key, CAFile: cfg.CA})
	if err != nil {
		return err
	}
	file, err := flowrec.OpenFile(flowrec.FileConfig{Path: cfg.File})
	if err != nil {
		return err
	}
	c, err := flowrec.New(flowrec.Config{Node: "node-a", NetnsFd: fd, Group: 8, Index: m.Index(), Model: model, Interval: time.Second,
		Sinks: []func(flowrec.Batch){snd.Sink, file.Sink, func(b flowrec.Batch) {
			if os.Getenv("FLOWREC_DEBUG") != "" {
				fmt.Fprintln(os.Stderr, "child batch", b.Seq, len(b.Flows), b.Dropped)
			}
		}}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := c.Open(ctx); err != nil {
		return err
	}
	go snd.Run(ctx)
	fmt.Println("ready", c.Boot())
	return c.Run(ctx)
}

// startChild starts a node process and waits until it records.
func startChild(t *testing.T, cfgPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLOWREC_CHILD="+cfgPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				ready <- sc.Text()
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the node process did not start recording within 30 s")
	}
	return cmd
}

// routedctlFlows runs routedctl flows with args against the aggregator.
func routedctlFlows(t *testing.T, base []string, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	cmd := ctl.New(&out, &errOut)
	cmd.SetArgs(append(append([]string{"flows"}, base...), args...))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("routedctl flows %v: %v (%s)", args, err, errOut.String())
	}
	return out.String()
}

// waitCtl runs routedctl flows until its output holds every want, and
// returns how long that took.
func waitCtl(t *testing.T, base []string, what string, args []string, want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, 200*time.Millisecond, func() string {
		out := routedctlFlows(t, base, args...)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return fmt.Sprintf("%s: routedctl flows %v lacks %q:\n%s", what, args, w, out)
			}
		}
		return ""
	})
	return time.Since(start)
}

// TestFlowsEndToEnd: a node process records real connections and sends
// them over mutual TLS to an aggregator; routedctl flows shows each
// (the deny naming its rule, the GlobalNetworkPolicy of another tier,
// the allowed flow with the staged deny) within 10 s of its first
// packet, and so does the aggregator's page in headless Chromium. The node process is killed -9 and started again: flows
// resume and the aggregator reports the node's restart as a gap.
func TestFlowsEndToEnd(t *testing.T) {
	l := newFlowLabBare(t)
	agg := flowaggtest.Start(t, "end-to-end-reader-token")
	dir := t.TempDir()
	url := agg.URL
	cert, key := agg.PKI.IssueClient(t, "routed-node")
	cfg := childConfig{Netns: l.node.Path(), Endpoints: l.eps, URL: url, Cert: cert, Key: key, CA: agg.PKI.CAFile, File: filepath.Join(dir, "node", "flows.jsonl")}
	js, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "child.json")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		t.Fatal(err)
	}
	base := agg.CtlArgs()

	child := startChild(t, cfgPath)
	probeAt := time.Now()
	l.probe("a", "b", "tcp", 9090, false, false)
	l.probe("c", "b", "udp", 5353, true, false)
	l.probe("a", "b", "tcp", 8080, false, true)
	took := waitCtl(t, base, "the NetworkPolicy's deny", []string{"--verdict", "deny", "--port", "9090"}, "prod/a", "prod/b", "TCP/9090", "ingress default/np:prod/web[1] Deny")
	t.Logf("denied flow in routedctl flows %v after its probe's end (%v after the first probe)", took.Round(time.Millisecond), time.Since(probeAt).Round(time.Millisecond))
	waitCtl(t, base, "the other tier's GlobalNetworkPolicy deny", []string{"--policy", "security.guard", "--verdict", "deny"}, "dev/c", "UDP/5353", "ingress security/gnp:security.guard[0] Deny")
	waitCtl(t, base, "the allowed flow passed by tier security, staged to be denied", []string{"--port", "8080", "-o", "wide"},
		"allow", "ingress default/np:prod/web[0] Allow", "ingress: ingress security/gnp:security.guard[1] Pass", "sgnp:lockdown=deny")
	if time.Since(probeAt) > 10*time.Second {
		t.Errorf("the flows took %v to show, want under 10 s", time.Since(probeAt))
	}
	// The page shows them too: denied rows marked, filtered to the
	// NetworkPolicy's deny, its rule named.
	checkPage(t, url, agg.Token)

	// kill -9: the process's last interval is lost; a new one adopts
	// the tables and records again under a new boot ID.
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	startChild(t, cfgPath)
	polab.Expect(t, l.pods["a"].NS, polab.Probe{Proto: "tcp", Dst: l.pods["b"].Addr(false), Port: 9090, SrcPort: 42424}, false, "a->b after the restart")
	waitCtl(t, base, "the restart as a gap", nil, "GAP: node-restarted")
	// The connection after the restart is recorded too.
	testenv.Eventually(t, 10*time.Second, 200*time.Millisecond, func() string {
		out := routedctlFlows(t, base, "--verdict", "deny", "--port", "9090", "-o", "json")
		after := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var e flowagg.Entry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatal(err)
			}
			if e.Flow != nil && e.Flow.End.After(probeAt) {
				after++
			}
		}
		if after < 2 {
			return fmt.Sprintf("deny flows to 9090 before and after the restart: %d entries, want 2:\n%s", after, out)
		}
		return ""
	})
}
