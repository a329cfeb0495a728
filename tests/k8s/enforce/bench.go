package enforce

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Probe timing of the benchmark and the checks: every pair is probed
// every probeInterval (the resolution of every figure); a probe that
// got no answer within probeTimeout is a drop. The timeout stays under
// the kernel's first SYN retransmission (1 s), so a probe is one SYN's
// fate, and far above an allowed handshake's time on a loaded machine.
const (
	probeInterval = 20 * time.Millisecond
	probeTimeout  = 900 * time.Millisecond
	// settleProbes in a row with the new verdict end a wait.
	settleProbes = 10
)

// BenchResult holds one duration per change, from the API request to
// the last probed pair's new verdict.
type BenchResult struct {
	// Apply: a NetworkPolicy denying ingress to both servers created;
	// Delete: it deleted.
	Apply, Delete []time.Duration
	// LabelAllow: a client labelled so that a standing policy admits it
	// to both servers; LabelDeny: the label removed again.
	LabelAllow, LabelDeny []time.Duration
	// Flaps counts probes that saw the new verdict and then the old one
	// again (each is a change that was not monotonic).
	Flaps int
	// Imprecise counts probes left out (Prober.Imprecise).
	Imprecise int
}

// Bench times n policy changes of each kind on the fixture: n creations
// and n deletions of a default-deny ingress policy for the servers
// (every client -> server pair, both nodes), and n label changes of a
// client (alternately the client on each node; its pairs to the servers
// on both nodes). Each change is timed from just before its API request
// to the sending time of the first probe after which every probed pair
// only sees the new verdict.
func (e *Env) Bench(ctx context.Context, f *Fixture, n int) (res BenchResult, err error) {
	pctx, stop := context.WithCancel(ctx)
	p := &Prober{Interval: probeInterval, Timeout: probeTimeout}
	p.Start(pctx, f.Pairs())
	defer func() { stop(); p.Wait(); res.Imprecise = p.Imprecise() }()
	all := names(f.Pairs())
	if _, err := e.waitVerdict(ctx, p, all, time.Now(), true); err != nil {
		return res, fmt.Errorf("before the benchmark: %w", err)
	}
	nps := e.K.NetworkingV1().NetworkPolicies(f.NS)
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-deny"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	defer func() { _ = nps.Delete(context.Background(), deny.Name, metav1.DeleteOptions{}) }()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := nps.Create(ctx, deny, metav1.CreateOptions{}); err != nil {
			return res, err
		}
		d, err := e.waitVerdict(ctx, p, all, t0, false)
		if err != nil {
			return res, fmt.Errorf("apply %d: %w", i+1, err)
		}
		res.Apply = append(res.Apply, d.max)
		res.Flaps += d.flaps
		t0 = time.Now()
		if err := nps.Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
			return res, err
		}
		d, err = e.waitVerdict(ctx, p, all, t0, true)
		if err != nil {
			return res, fmt.Errorf("delete %d: %w", i+1, err)
		}
		res.Delete = append(res.Delete, d.max)
		res.Flaps += d.flaps
		e.Logf("  policy %d/%d: apply %s, delete %s", i+1, n, res.Apply[i].Round(time.Millisecond), res.Delete[i].Round(time.Millisecond))
	}

	admit := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-admit"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"access": "yes"}}}}}}}}
	if _, err := nps.Create(ctx, admit, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	defer func() { _ = nps.Delete(context.Background(), admit.Name, metav1.DeleteOptions{}) }()
	if _, err := e.waitVerdict(ctx, p, all, time.Now(), false); err != nil {
		return res, fmt.Errorf("policy admitting access=yes: %w", err)
	}
	access := map[string]bool{}
	for i := 0; i < n; i++ {
		c := f.Clients[i%len(f.Clients)]
		want := !access[c.Name]
		patch := `{"metadata":{"labels":{"access":"yes"}}}`
		if !want {
			patch = `{"metadata":{"labels":{"access":null}}}`
		}
		t0 := time.Now()
		if _, err := e.K.CoreV1().Pods(f.NS).Patch(ctx, c.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return res, err
		}
		d, err := e.waitVerdict(ctx, p, names(f.Pairs(c.Name)), t0, want)
		if err != nil {
			return res, fmt.Errorf("label change %d (%s access=%v): %w", i+1, c.Name, want, err)
		}
		access[c.Name] = want
		if want {
			res.LabelAllow = append(res.LabelAllow, d.max)
		} else {
			res.LabelDeny = append(res.LabelDeny, d.max)
		}
		res.Flaps += d.flaps
		e.Logf("  label %d/%d: %s access=%v %s", i+1, n, c.Name, want, d.max.Round(time.Millisecond))
	}
	return res, nil
}

type verdictChange struct {
	max   time.Duration
	flaps int
}

// waitVerdict waits until every pair has seen want on settleProbes
// probes in a row, lets the probes in flight finish, and returns when
// the last pair changed after t0.
func (e *Env) waitVerdict(ctx context.Context, p *Prober, pairs []string, t0 time.Time, want bool) (verdictChange, error) {
	var d verdictChange
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := true
		for _, pr := range pairs {
			if !p.Settled(pr, t0, want, settleProbes) {
				done = false
				break
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var st []string
			for _, pr := range pairs {
				total, answered, connected := p.Count(pr, t0, time.Now())
				st = append(st, fmt.Sprintf("%s: %d probes, %d answered, %d connected", pr, total, answered, connected))
			}
			return d, fmt.Errorf("no verdict allowed=%v within 60s: %s", want, strings.Join(st, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
	end := time.Now()
	time.Sleep(probeTimeout + 50*time.Millisecond) // the probes sent before end have finished
	for _, pr := range pairs {
		ch, ok := p.ChangeAfter(pr, t0, end, want)
		if !ok {
			return d, fmt.Errorf("%s lost verdict allowed=%v again", pr, want)
		}
		if ch.After > d.max {
			d.max = ch.After
		}
		d.flaps += ch.Flaps
		if ch.Flaps > 0 {
			e.Logf("    %s: %d probes saw allowed=%v before it held, sent at %v; it held from %s", pr, ch.Flaps, want, roundAll(ch.FlapAt), ch.After.Round(time.Millisecond))
		}
	}
	return d, nil
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// Percentile is the nearest-rank q-th percentile (0 < q <= 100) of ds.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := int(math.Ceil(q / 100 * float64(len(s))))
	if r < 1 {
		r = 1
	}
	return s[r-1]
}

// Summary is one line of figures for ds.
func Summary(name string, ds []time.Duration) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
	return fmt.Sprintf("%-22s n=%d  p50 %s  p90 %s  p99 %s  max %s", name, len(ds), ms(Percentile(ds, 50)), ms(Percentile(ds, 90)),
		ms(Percentile(ds, 99)), ms(Percentile(ds, 100)))
}
