package enforce

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/routed-net/routed/tests/k8s/cluster"
)

// restartInterval is how often the restart check probes each pair: it
// runs for minutes, so less often than the benchmark.
const restartInterval = 50 * time.Millisecond

// Restarts checks that restarting routed (kill -9 and graceful), its
// controllers and CNI ADDs, alone and together, never opens
// enforcement and never breaks an allowed flow: on the fixture, a
// policy admits to both servers only pods labelled access=yes; client-1
// (first node) has the label, client-2 (second node) not. Every client
// probes every server continuously through all the steps: client-1's
// probes must all connect, client-2's must all go unanswered. Last,
// the policy is deleted while the controllers are down: client-2 stays
// denied until they come back, then routed's copy of the policy goes
// and client-2 gets through (no stale rule).
func (e *Env) Restarts(ctx context.Context, f *Fixture) error {
	nps := e.K.NetworkingV1().NetworkPolicies(f.NS)
	admit := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "admit"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"access": "yes"}}}}}}}}
	if _, err := nps.Create(ctx, admit, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = nps.Delete(context.Background(), admit.Name, metav1.DeleteOptions{}) }()
	allowedFrom, deniedFrom := f.Clients[0].Name, f.Clients[len(f.Clients)-1].Name
	if _, err := e.K.CoreV1().Pods(f.NS).Patch(ctx, allowedFrom, types.MergePatchType, []byte(`{"metadata":{"labels":{"access":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	allowedPairs, deniedPairs := names(f.Pairs(allowedFrom)), names(f.Pairs(deniedFrom))
	pctx, stop := context.WithCancel(ctx)
	p := &Prober{Interval: restartInterval, Timeout: probeTimeout}
	p.Start(pctx, f.Pairs())
	defer func() { stop(); p.Wait() }()
	if _, err := e.waitVerdict(ctx, p, allowedPairs, time.Now(), true); err != nil {
		return fmt.Errorf("before the restarts: %w", err)
	}
	if _, err := e.waitVerdict(ctx, p, deniedPairs, time.Now(), false); err != nil {
		return fmt.Errorf("before the restarts: %w", err)
	}
	node1, node2 := e.C.Nodes[0].Name, e.C.Nodes[len(e.C.Nodes)-1].Name
	cni := 0
	cniAddDel := func(ctx context.Context, node string) error {
		cni++
		name := fmt.Sprintf("cni-%d", cni)
		if _, err := e.Pod(ctx, PodSpec{NS: f.NS, Name: name, Node: node}); err != nil {
			return err
		}
		if _, err := e.Running(ctx, f.NS, name, 3*time.Minute); err != nil {
			return err
		}
		return e.deletePod(ctx, f.NS, name)
	}
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"routed kill -9 on " + node1, func(ctx context.Context) error { return e.killRouted(ctx, node1) }},
		{"routed kill -9 on " + node2, func(ctx context.Context) error { return e.killRouted(ctx, node2) }},
		{"routed graceful restart (pod deleted) on " + node1, func(ctx context.Context) error { return e.replace(ctx, "node", node1) }},
		{"routed graceful restart (pod deleted) on " + node2, func(ctx context.Context) error { return e.replace(ctx, "node", node2) }},
		{"routed-controllers kill -9", func(ctx context.Context) error { return e.killControllers(ctx) }},
		{"routed-controllers graceful restart (pod deleted)", func(ctx context.Context) error { return e.replace(ctx, "controllers", "") }},
		{"CNI ADD and DEL on both nodes", func(ctx context.Context) error {
			return all(ctx, func(ctx context.Context) error { return cniAddDel(ctx, node1) }, func(ctx context.Context) error { return cniAddDel(ctx, node2) })
		}},
		{"CNI ADD on " + node1 + " while routed is killed there", func(ctx context.Context) error {
			return all(ctx, func(ctx context.Context) error { return e.killRouted(ctx, node1) }, func(ctx context.Context) error { return cniAddDel(ctx, node1) })
		}},
		{"routed-controllers kill -9 together with routed kill -9 on " + node2, func(ctx context.Context) error {
			return all(ctx, e.killControllers, func(ctx context.Context) error { return e.killRouted(ctx, node2) })
		}},
		{"routed-controllers down; routed restarted on both nodes; CNI ADD; routed-controllers back", func(ctx context.Context) error {
			if err := e.scaleControllers(ctx, 0); err != nil {
				return err
			}
			if err := all(ctx, func(ctx context.Context) error { return e.killRouted(ctx, node1) },
				func(ctx context.Context) error { return e.replace(ctx, "node", node2) }); err != nil {
				return err
			}
			if err := cniAddDel(ctx, node2); err != nil {
				return err
			}
			return e.scaleControllers(ctx, 1)
		}},
	}
	start := time.Now()
	type window struct {
		name       string
		start, end time.Time
	}
	var windows []window
	for _, s := range steps {
		t := time.Now()
		e.Logf("  restart: %s", s.name)
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		// The step is over once its restarted parts are Ready; probe on
		// a little so a late effect still falls in its window.
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
		windows = append(windows, window{s.name, t, time.Now()})
		e.Logf("    done in %s", time.Since(t).Round(time.Millisecond))
	}

	e.Logf("  restart: routed-controllers down; the NetworkPolicy deleted; routed-controllers back")
	if err := e.scaleControllers(ctx, 0); err != nil {
		return err
	}
	if err := nps.Delete(ctx, admit.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	// While the controllers are down nothing removes routed's copy: the
	// denied client stays denied (the policy fails closed, not open).
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		return err
	}
	if err := e.waitRoutedPolicy(ctx, f.NS, admit.Name, true); err != nil {
		return fmt.Errorf("routed's copy went while the controllers were down: %w", err)
	}
	back := time.Now()
	if err := e.scaleControllers(ctx, 1); err != nil {
		return err
	}
	if err := e.waitRoutedPolicy(ctx, f.NS, admit.Name, false); err != nil {
		return fmt.Errorf("stale policy: %w", err)
	}
	d, err := e.waitVerdict(ctx, p, deniedPairs, back, true)
	if err != nil {
		return fmt.Errorf("after the policy was deleted while the controllers were down: %w", err)
	}
	e.Logf("    the deleted policy's rules gone %s after routed-controllers were scaled back up", d.max.Round(time.Millisecond))
	end := time.Now()

	var bad []string
	for _, w := range windows {
		var line []string
		for _, pr := range allowedPairs {
			total, _, connected := p.Count(pr, w.start, w.end)
			line = append(line, fmt.Sprintf("%s %d/%d connected", pr, connected, total))
			if connected < total || total == 0 {
				bad = append(bad, fmt.Sprintf("%s: %s: %d of %d probes failed", w.name, pr, total-connected, total))
			}
		}
		for _, pr := range deniedPairs {
			total, answered, _ := p.Count(pr, w.start, w.end)
			line = append(line, fmt.Sprintf("%s %d/%d answered", pr, answered, total))
			if answered > 0 || total == 0 {
				bad = append(bad, fmt.Sprintf("%s: %s: %d of %d denied probes answered", w.name, pr, answered, total))
			}
		}
		e.Logf("  %s: %s", w.name, strings.Join(line, ", "))
	}
	for _, pr := range allowedPairs {
		total, _, connected := p.Count(pr, start, end)
		e.Logf("  whole run: %s: %d/%d connected", pr, connected, total)
		if connected < total {
			bad = append(bad, fmt.Sprintf("whole run: %s: %d of %d probes failed", pr, total-connected, total))
		}
	}
	for _, pr := range deniedPairs {
		total, answered, _ := p.Count(pr, start, back)
		e.Logf("  until the controllers came back: %s: %d/%d answered", pr, answered, total)
		if answered > 0 {
			bad = append(bad, fmt.Sprintf("until the controllers came back: %s: %d of %d denied probes answered", pr, answered, total))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("enforcement through restarts:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// all runs fs concurrently and returns the first error.
func all(ctx context.Context, fs ...func(context.Context) error) error {
	errc := make(chan error, len(fs))
	for _, f := range fs {
		go func(f func(context.Context) error) { errc <- f(ctx) }(f)
	}
	var first error
	for range fs {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// systemPods are routed's kube-system pods of component ("node" or
// "controllers"), on node when it is not "".
func (e *Env) systemPods(ctx context.Context, component, node string) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=routed,app.kubernetes.io/component=" + component}
	if node != "" {
		opts.FieldSelector = "spec.nodeName=" + node
	}
	l, err := e.K.CoreV1().Pods("kube-system").List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func ready(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// readyPod returns the one Ready pod of component on node.
func (e *Env) readyPod(ctx context.Context, component, node string) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := cluster.WaitFor(ctx, 3*time.Minute, component+" pod Ready on "+node, func() error {
		l, err := e.systemPods(ctx, component, node)
		if err != nil {
			return err
		}
		for i := range l {
			if ready(&l[i]) {
				out = &l[i]
				return nil
			}
		}
		return fmt.Errorf("none of %d Ready", len(l))
	})
	return out, err
}

// killAndWait sends SIGKILL to the main process of component's pod on
// node and waits until kubelet has restarted it and it is Ready again.
func (e *Env) killAndWait(ctx context.Context, component, node string) error {
	p, err := e.readyPod(ctx, component, node)
	if err != nil {
		return err
	}
	pid, err := e.ContainerPID(ctx, p)
	if err != nil {
		return err
	}
	before := restarts(p)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %d (%s): %w", pid, p.Name, err)
	}
	return cluster.WaitFor(ctx, 3*time.Minute, p.Name+" restarted and Ready", func() error {
		q, err := e.K.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if restarts(q) <= before || !ready(q) {
			return fmt.Errorf("restarts %d, ready %v", restarts(q), ready(q))
		}
		return nil
	})
}

func (e *Env) killRouted(ctx context.Context, node string) error {
	return e.killAndWait(ctx, "node", node)
}

func (e *Env) killControllers(ctx context.Context) error {
	return e.killAndWait(ctx, "controllers", "")
}

// replace deletes component's pod on node (graceful: SIGTERM, its grace
// period) and waits until its replacement is Ready.
func (e *Env) replace(ctx context.Context, component, node string) error {
	p, err := e.readyPod(ctx, component, node)
	if err != nil {
		return err
	}
	if err := e.K.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return cluster.WaitFor(ctx, 3*time.Minute, "a Ready replacement of "+p.Name, func() error {
		l, err := e.systemPods(ctx, component, node)
		if err != nil {
			return err
		}
		for i := range l {
			if l[i].UID != p.UID && ready(&l[i]) {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
}

// scaleControllers sets routed-controllers' replicas and waits until
// that many pods are Ready (for 0: until none is left).
func (e *Env) scaleControllers(ctx context.Context, n int32) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	if _, err := e.K.AppsV1().Deployments("kube-system").Patch(ctx, "routed-controllers", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	return cluster.WaitFor(ctx, 3*time.Minute, fmt.Sprintf("routed-controllers at %d", n), func() error {
		l, err := e.systemPods(ctx, "controllers", "")
		if err != nil {
			return err
		}
		var r int32
		for i := range l {
			if ready(&l[i]) {
				r++
			}
		}
		if (n == 0 && len(l) == 0) || (n > 0 && r == n) {
			return nil
		}
		return fmt.Errorf("%d pods, %d Ready", len(l), r)
	})
}

// deletePod deletes a pod and waits until it is gone (its CNI DEL ran).
func (e *Env) deletePod(ctx context.Context, ns, name string) error {
	if err := e.K.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return cluster.WaitFor(ctx, 3*time.Minute, "pod "+ns+"/"+name+" gone", func() error {
		_, err := e.K.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}
