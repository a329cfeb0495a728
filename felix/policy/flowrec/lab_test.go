package flowrec_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
)

// flowLab is a node with pods a and b in namespace prod and c in dev, a
// Manager programming it with flow marks on nflog group 8, a model with
// the same resources (and the staged ones), and a collector whose
// batches the test reads.
type flowLab struct {
	t       testing.TB
	node    *polab.Node
	m       *policy.Manager
	model   *flowrec.LockedModel
	pods    map[string]*polab.Pod
	eps     []policy.Endpoint
	mu      sync.Mutex
	batches []flowrec.Batch
	file    string
}

const flowModel = `
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.dev}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.guard}
spec:
  tier: security
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - {action: Deny, protocol: UDP, source: {namespaceSelector: projectcalico.org/name == 'dev'}, destination: {ports: [5353]}}
  - {action: Pass}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: TCP, destination: {ports: [8080]}}
  - {action: Deny, protocol: TCP, destination: {ports: [9090]}}
  - {action: Allow, protocol: UDP}
`

// stagedDeny would deny b's web port.
const stagedDeny = `
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: lockdown}
spec: {order: 1, selector: app == 'b', types: [Ingress], ingress: [{action: Deny, protocol: TCP, destination: {ports: [8080]}}]}
`

// loadModel gives the lab's policy, staged policy and endpoints to a
// Manager and a model, and programs the Manager.
func loadModel(m *policy.Manager, model *flowrec.LockedModel, eps []policy.Endpoint) error {
	d, err := api.Decode([]byte(flowModel))
	if err != nil {
		return err
	}
	for _, r := range d.Resources {
		switch r := r.(type) {
		case *api.Tier:
			m.SetTier(r)
		case api.Policy:
			err = m.SetPolicy(r)
		case *api.Profile:
			err = m.SetProfile(r)
		}
		if err != nil {
			return err
		}
		if err := model.Update(func(c *policy.Calc) error { return c.SetResource(r) }); err != nil {
			return err
		}
	}
	sd, err := api.Decode([]byte(stagedDeny))
	if err != nil {
		return err
	}
	sg := sd.Resources[0].(*api.StagedGlobalNetworkPolicy)
	model.SetStaged([]policy.StagedPolicy{{Kind: sg.GetKind(), Name: sg.Metadata.Name, Action: sg.Action(), Policy: sg.Enforced()}})
	for _, ep := range eps {
		if err := m.SetEndpoint(ep); err != nil {
			return err
		}
		_ = model.Update(func(c *policy.Calc) error { c.SetEndpoint(ep); return nil })
	}
	return m.Apply(context.Background())
}

// newFlowLabBare is the node, its pods and the programmed policy
// (flow marks on group 8; opts may change the log configuration), with
// conntrack accounting on.
func newFlowLabBare(t testing.TB, opts ...func(*policy.LogConfig)) *flowLab {
	t.Helper()
	lc := policy.LogConfig{Group: 7, FlowGroup: 8}
	for _, o := range opts {
		o(&lc)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables, conntrack)")
	}
	l := &flowLab{t: t, node: polab.NewNode(t), pods: map[string]*polab.Pod{}, model: flowrec.NewLockedModel()}
	var err error
	l.m, err = policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: l.node.Fd}, Log: lc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.m.Close() })
	for i, p := range []struct{ name, ns string }{{"a", "prod"}, {"b", "prod"}, {"c", "dev"}} {
		pod := l.node.AddPod(t, "cali"+p.name, fmt.Sprintf("10.65.0.%d", i+1), fmt.Sprintf("fd00:65::%d", i+1))
		for _, port := range []int{8080, 9090, 5353} {
			polab.Serve(t, pod.NS, port)
		}
		l.pods[p.name] = pod
		l.eps = append(l.eps, policy.Endpoint{Key: "node-k8s-" + p.ns + "-" + p.name + "-eth0", Iface: pod.Iface, Local: true, Node: "node",
			Pod: p.name, Namespace: p.ns, Labels: map[string]string{"app": p.name}, Profiles: []string{"kns." + p.ns}, IPs: pod.Prefixes()})
	}
	if err := loadModel(l.m, l.model, l.eps); err != nil {
		t.Fatal(err)
	}
	if err := flowrec.EnableAccounting(l.node.Fd); err != nil {
		t.Fatal(err)
	}
	// Closing TCP connections leave conntrack after 1 s (not minutes), so
	// their ends (DESTROY, with counters) arrive within the test.
	l.closeTimeouts(1)
	return l
}

// closeTimeouts sets the node's conntrack timeouts of closing TCP
// connections (seconds).
func (l *flowLab) closeTimeouts(secs int) {
	l.t.Helper()
	l.node.Do(l.t, func() error {
		for _, s := range []string{"time_wait", "fin_wait", "close_wait", "last_ack", "close"} {
			if err := os.WriteFile("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_"+s, []byte(strconv.Itoa(secs)), 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// pollCloseTimeout is the closing timeout (seconds) of a lab whose
// collector reads the table by generations: longer than a poll, since
// an entry must still be there when its end is read (the kernel's dump
// skips one whose timeout passed).
const pollCloseTimeout = 4

// newFlowLab is newFlowLabBare with a collector whose batches the
// test reads and a JSON-lines file.
func newFlowLab(t *testing.T, opts ...func(*policy.LogConfig)) *flowLab {
	t.Helper()
	l := newFlowLabBare(t, opts...)
	l.file = filepath.Join(t.TempDir(), "flows", "flows.jsonl")
	fs, err := flowrec.OpenFile(flowrec.FileConfig{Path: l.file})
	if err != nil {
		t.Fatal(err)
	}
	c, err := flowrec.New(flowrec.Config{Node: "node", NetnsFd: l.node.Fd, Group: 8, Index: l.m.Index(), Model: l.model,
		Interval: time.Second, Sinks: []func(flowrec.Batch){fs.Sink, func(b flowrec.Batch) {
			l.mu.Lock()
			l.batches = append(l.batches, b)
			l.mu.Unlock()
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	runCollector(t, c)
	// In the VM of tests/vm the collector must run on the probes (the
	// kernel there allows them), not fall back unseen.
	if os.Getenv("ROUTED_IN_VM") == "1" && c.Source() != flowrec.SourceProbes {
		t.Fatalf("the collector takes connections from %q, not the probes", c.Source())
	}
	return l
}

// runCollector opens and runs c until the test ends, and fails the
// test if it stopped for anything but that.
func runCollector(tb testing.TB, c *flowrec.Collector) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Open(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			tb.Errorf("collector: %v", err)
		}
	})
}

// readJSON reads a child process's configuration file into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// waitFlow waits (10 s, the goal) for an aggregated flow want accepts.
func (l *flowLab) waitFlow(what string, want func(f *flowrec.Flow) bool) flowrec.Flow {
	l.t.Helper()
	var found flowrec.Flow
	testenv.Eventually(l.t, 10*time.Second, 100*time.Millisecond, func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var seen []string
		for _, b := range l.batches {
			for i := range b.Flows {
				if want(&b.Flows[i]) {
					found = b.Flows[i]
					return ""
				}
				js, _ := json.Marshal(b.Flows[i])
				seen = append(seen, string(js))
			}
		}
		return fmt.Sprintf("no flow %s; flows seen:\n%s", what, strings.Join(seen, "\n"))
	})
	return found
}

func (l *flowLab) probe(from, to, proto string, port int, v6, want bool) {
	l.t.Helper()
	polab.Expect(l.t, l.pods[from].NS, polab.Probe{Proto: proto, Dst: l.pods[to].Addr(v6), Port: port}, want, from+"->"+to)
}

func steps(t *flowrec.Trace) string {
	if t == nil {
		return "<none>"
	}
	var s []string
	for _, x := range t.Steps {
		s = append(s, x.Action+":"+x.Policy+x.Profile+x.Kind)
	}
	return t.Verdict + "[" + strings.Join(s, " ") + "]"
}

func match(src, dst netip.Addr, proto string, port uint16) func(f *flowrec.Flow) bool {
	return func(f *flowrec.Flow) bool {
		return f.Src.Addr == src.String() && f.Dst.Addr == dst.String() && f.Proto == proto && f.DstPort == port
	}
}

// TestFlowVerdicts: real connections in a node namespace, each
// recorded with the verdict the kernel gave and the trace of rules
// that decided it: allowed by a NetworkPolicy after a Pass of another
// tier (and staged to be denied), denied by a NetworkPolicy, denied by
// a GlobalNetworkPolicy of another tier, allowed by a profile (ICMP,
// IPv4 and IPv6); ends named as pods; ended connections counted with
// their bytes; the same flows in the JSON-lines file.
func TestFlowVerdicts(t *testing.T) {
	l := newFlowLab(t)
	a, b, c := l.pods["a"], l.pods["b"], l.pods["c"]
	for _, v6 := range []bool{false, true} {
		l.probe("a", "b", "tcp", 8080, v6, true)
		l.probe("a", "b", "tcp", 9090, v6, false)
		l.probe("c", "b", "udp", 5353, v6, false)
		l.probe("a", "c", "icmp", 0, v6, true)
		l.probe("a", "b", "udp", 5353, v6, true)
	}
	for _, v6 := range []bool{false, true} {
		// Allowed: egress by a's profile; ingress passed by the
		// security tier, allowed by the NetworkPolicy; the staged
		// lockdown would deny it.
		f := l.waitFlow(fmt.Sprintf("a->b tcp/8080 v6=%v", v6), match(a.Addr(v6), b.Addr(v6), "TCP", 8080))
		if f.Verdict != flowrec.Allow || f.Started == 0 || steps(f.Egress) != "allow[Allow:kns.prodprofile rule]" ||
			steps(f.Ingress) != "allow[Pass:gnp:security.guardpolicy rule Allow:np:prod/webpolicy rule]" {
			t.Errorf("a->b tcp/8080 v6=%v: verdict %s started %d egress %s ingress %s", v6, f.Verdict, f.Started, steps(f.Egress), steps(f.Ingress))
		}
		if f.Src.Kind != flowrec.EndPod || f.Src.Namespace != "prod" || f.Src.Name != "a" || !f.Src.Local || f.Dst.Name != "b" || f.Dst.Labels["app"] != "b" {
			t.Errorf("a->b ends: %+v -> %+v", f.Src, f.Dst)
		}
		if len(f.Staged) != 1 || f.Staged[0].Policy != "staged:sgnp:lockdown" || f.Staged[0].Allowed || !f.Staged[0].Changed {
			t.Errorf("a->b staged: %+v", f.Staged)
		}
		// Denied by the NetworkPolicy's Deny rule.
		f = l.waitFlow(fmt.Sprintf("a->b tcp/9090 v6=%v", v6), match(a.Addr(v6), b.Addr(v6), "TCP", 9090))
		if f.Verdict != flowrec.Deny || f.Denied == 0 || f.Started != 0 || f.Ingress.Decider().Policy != "np:prod/web" || f.Ingress.Decider().Action != "Deny" || f.Ingress.Decider().Index != 1 {
			t.Errorf("a->b tcp/9090 v6=%v: verdict %s denied %d ingress %s", v6, f.Verdict, f.Denied, steps(f.Ingress))
		}
		// Denied by the GlobalNetworkPolicy of tier security.
		f = l.waitFlow(fmt.Sprintf("c->b udp/5353 v6=%v", v6), match(c.Addr(v6), b.Addr(v6), "UDP", 5353))
		if d := f.Ingress.Decider(); f.Verdict != flowrec.Deny || d.Policy != "gnp:security.guard" || d.Tier != "security" || d.Index != 0 {
			t.Errorf("c->b udp/5353 v6=%v: verdict %s ingress %s", v6, f.Verdict, steps(f.Ingress))
		}
		// ICMP echo, allowed by the profiles; the echo type is its port.
		icmp, typ := "ICMP", uint16(8)
		if v6 {
			icmp, typ = "ICMPv6", 128
		}
		f = l.waitFlow(fmt.Sprintf("a->c %s", icmp), match(a.Addr(v6), c.Addr(v6), icmp, typ))
		if f.Verdict != flowrec.Allow || f.Ingress.Decider().Profile != "kns.dev" {
			t.Errorf("a->c %s: verdict %s ingress %s", icmp, f.Verdict, steps(f.Ingress))
		}
	}
	// A closed TCP connection ends with its bytes counted each way. The
	// kernel reaps expired entries lazily (on a lookup of the same
	// tuple, or in a sweep that may wait a minute): a connection from
	// the same source port finds the first one's entry and ends it.
	for range 2 {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(false), Port: 8080, SrcPort: 41000}, true, "a->b from port 41000")
	}
	f := l.waitFlow("a->b tcp/8080 ended", func(f *flowrec.Flow) bool {
		return match(a.Addr(false), b.Addr(false), "TCP", 8080)(f) && f.Ended > 0
	})
	if f.PacketsOut < 3 || f.BytesOut == 0 || f.PacketsIn < 3 || f.BytesIn == 0 || f.Ingress.Decider().Policy != "np:prod/web" {
		t.Errorf("ended a->b tcp/8080: %d/%d packets, %d/%d bytes out/in, ingress %s", f.PacketsOut, f.PacketsIn, f.BytesOut, f.BytesIn, steps(f.Ingress))
	}
	// The JSON-lines file holds the denied flow with its rule.
	testenv.Eventually(t, 10*time.Second, 200*time.Millisecond, func() string {
		if !fileHas(t, l.file, func(f flowrec.Flow) bool {
			return f.Verdict == flowrec.Deny && f.Ingress != nil && f.Ingress.Decider().ID == "pi-np:prod/web/1" && f.DstPort == 9090
		}) {
			return fmt.Sprintf("the JSON-lines file %s has no denied flow naming pi-np:prod/web/1", l.file)
		}
		return ""
	})
}

func fileHas(t *testing.T, path string, want func(flowrec.Flow) bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var fl flowrec.Flow
		if err := json.Unmarshal(sc.Bytes(), &fl); err != nil {
			t.Fatalf("%s: a line is no JSON: %v: %s", path, err, sc.Text())
		}
		if want(fl) {
			return true
		}
	}
	return false
}
