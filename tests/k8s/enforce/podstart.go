package enforce

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/routed-net/routed/routed/controllers"
	"github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
)

// webPort is where the pod-start checks' pods serve (busybox httpd,
// the pod's own process).
const webPort = 8080

// podStartInterval paces the pod-start probes: each web pod is probed
// by two clients, and busybox httpd forks per connection.
const podStartInterval = 50 * time.Millisecond

// reachableWithin is how soon after kubelet reports a pod Running a
// pod without policy must answer probes from both nodes.
const reachableWithin = 2 * time.Second

// deniedWindow is how long after Running the default-denied pods are
// still probed (zero answers) before the policy is removed.
const deniedWindow = 5 * time.Second

// PodStart checks, with the fixture's clients as probe sources (one per
// node):
//
//   - deny: in namespace ns+"-deny" with a default-deny ingress
//     NetworkPolicy (written to routed's datastore before the pods are
//     created), one web pod per node, each serving HTTP from its first
//     instant, never answers a probe: the probes run from before the
//     pods are created until deniedWindow after both are Running. The
//     addresses are pinned (cni.projectcalico.org/ipAddrs) so probing
//     starts before they exist. Deleting the policy then makes them
//     answer (the server and the path were there all along);
//   - open: in namespace ns+"-open", without policy, both pods answer
//     from both nodes within reachableWithin of being seen Running.
//
// ips are four unused pool addresses: two for each namespace.
func (e *Env) PodStart(ctx context.Context, f *Fixture, ns string, ips [4]string) error {
	if err := e.podStartDenied(ctx, f, ns+"-deny", ips[0], ips[1]); err != nil {
		return fmt.Errorf("pod start, default deny: %w", err)
	}
	if err := e.podStartOpen(ctx, f, ns+"-open", ips[2], ips[3]); err != nil {
		return fmt.Errorf("pod start, no policy: %w", err)
	}
	return nil
}

func (e *Env) webPods(ns string, ips ...string) []PodSpec {
	var out []PodSpec
	for i, n := range e.C.Nodes {
		out = append(out, PodSpec{NS: ns, Name: fmt.Sprintf("web-%d", i+1), Node: n.Name, IP: ips[i], Labels: map[string]string{"app": "web"},
			Args: []string{"httpd", "-f", "-p", strconv.Itoa(webPort), "-h", "/"}})
	}
	return out
}

func (f *Fixture) pairsTo(ips ...string) []Pair {
	var out []Pair
	for _, c := range f.Clients {
		for _, ip := range ips {
			out = append(out, Pair{Name: c.Name + "->" + ip, From: f.netns[c.Name], To: netip.AddrPortFrom(netip.MustParseAddr(ip), webPort)})
		}
	}
	return out
}

func (e *Env) podStartDenied(ctx context.Context, f *Fixture, ns, ip1, ip2 string) error {
	del, err := e.Namespace(ctx, ns, nil)
	defer del()
	if err != nil {
		return err
	}
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default-deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	nps := e.K.NetworkingV1().NetworkPolicies(ns)
	if _, err := nps.Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := e.waitRoutedPolicy(ctx, ns, "default-deny", true); err != nil {
		return err
	}
	pairs := f.pairsTo(ip1, ip2)
	pctx, stop := context.WithCancel(ctx)
	p := &Prober{Interval: podStartInterval, Timeout: probeTimeout}
	start := time.Now()
	p.Start(pctx, pairs)
	defer func() { stop(); p.Wait() }()
	for _, s := range e.webPods(ns, ip1, ip2) {
		if _, err := e.Pod(ctx, s); err != nil {
			return err
		}
	}
	for _, s := range e.webPods(ns, ip1, ip2) {
		pod, err := e.Running(ctx, ns, s.Name, 3*time.Minute)
		if err != nil {
			return err
		}
		if pod.Status.PodIP != s.IP {
			return fmt.Errorf("%s got %s, asked for %s", s.Name, pod.Status.PodIP, s.IP)
		}
	}
	running := time.Now()
	e.Logf("  deny: both web pods Running %s after the probes started; probing for %s more", running.Sub(start).Round(time.Millisecond), deniedWindow)
	if err := sleepCtx(ctx, deniedWindow); err != nil {
		return err
	}
	t0 := time.Now()
	if err := nps.Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	var bad []string
	for _, pr := range pairs {
		total, answered, _ := p.Count(pr.Name, start, t0)
		e.Logf("  deny: %s: %d probes while denied, %d answered", pr.Name, total, answered)
		if answered > 0 || total == 0 {
			bad = append(bad, fmt.Sprintf("%s: %d of %d probes answered", pr.Name, answered, total))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("a pod in a default-deny namespace answered: %s", strings.Join(bad, "; "))
	}
	d, err := e.waitAnswered(ctx, p, names(pairs), t0)
	if err != nil {
		return fmt.Errorf("after the policy's deletion: %w", err)
	}
	e.Logf("  deny: policy deleted, every pair answered within %s", d.Round(time.Millisecond))
	return nil
}

// waitAnswered waits until every pair has connected once since t0 and
// returns when the last did. busybox httpd (a process per connection,
// a listen backlog of 9) may drop a SYN when probes crowd in on a
// loaded machine, so an answer, not an unbroken run of them, is the
// event waited for.
func (e *Env) waitAnswered(ctx context.Context, p *Prober, pairs []string, t0 time.Time) (time.Duration, error) {
	var last time.Duration
	err := cluster.WaitFor(ctx, time.Minute, "every pair answered", func() error {
		last = 0
		for _, pr := range pairs {
			found := false
			for _, s := range p.Samples(pr, t0, time.Now().Add(time.Hour)) {
				if s.Verdict == Connected {
					found = true
					last = max(last, s.At.Sub(t0))
					break
				}
			}
			if !found {
				return fmt.Errorf("%s not yet", pr)
			}
		}
		return nil
	})
	return last, err
}

func (e *Env) podStartOpen(ctx context.Context, f *Fixture, ns, ip1, ip2 string) error {
	del, err := e.Namespace(ctx, ns, nil)
	defer del()
	if err != nil {
		return err
	}
	pairs := f.pairsTo(ip1, ip2)
	pctx, stop := context.WithCancel(ctx)
	p := &Prober{Interval: podStartInterval, Timeout: probeTimeout}
	p.Start(pctx, pairs)
	defer func() { stop(); p.Wait() }()
	specs := e.webPods(ns, ip1, ip2)
	for _, s := range specs {
		if _, err := e.Pod(ctx, s); err != nil {
			return err
		}
	}
	// Seen Running: the first poll that finds the pod Running (every
	// 20 ms), so the time is at most that late.
	seen := map[string]time.Time{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(seen) < len(specs) {
		for _, s := range specs {
			if _, ok := seen[s.IP]; ok {
				continue
			}
			pod, err := e.K.CoreV1().Pods(ns).Get(ctx, s.Name, metav1.GetOptions{})
			if err == nil && pod.Status.Phase == "Running" {
				seen[s.IP] = time.Now()
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("web pods not Running within 3m")
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	var last time.Time
	for _, t := range seen {
		if t.After(last) {
			last = t
		}
	}
	if err := sleepCtx(ctx, reachableWithin+probeTimeout+100*time.Millisecond); err != nil {
		return err
	}
	var bad []string
	for _, c := range f.Clients {
		for _, s := range specs {
			name := c.Name + "->" + s.IP
			run := seen[s.IP]
			var first time.Duration
			found := false
			for _, x := range p.Samples(name, run.Add(-time.Minute), run.Add(reachableWithin)) {
				if x.Verdict == Connected {
					first, found = x.At.Sub(run), true
					break
				}
			}
			if !found {
				bad = append(bad, fmt.Sprintf("%s: no answer within %s of Running", name, reachableWithin))
				continue
			}
			// Negative: answered before the poll saw Running.
			e.Logf("  open: %s: first answer %s after Running was seen", name, first.Round(time.Millisecond))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("a pod without policy was not reachable once Running: %s", strings.Join(bad, "; "))
	}
	return nil
}

// waitRoutedPolicy waits until routed's datastore has (or, with
// present false, no longer has) the policy the controllers write for
// NetworkPolicy ns/name.
func (e *Env) waitRoutedPolicy(ctx context.Context, ns, name string, present bool) error {
	full := ns + "/" + controllers.PolicyName(name)
	return cluster.WaitFor(ctx, time.Minute, fmt.Sprintf("routed policy %s present=%v", full, present), func() error {
		_, err := demo.Routedctl(ctx, e.C, e.Bin, "get", "networkpolicy", full)
		if (err == nil) == present {
			return nil
		}
		return fmt.Errorf("not yet")
	})
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
