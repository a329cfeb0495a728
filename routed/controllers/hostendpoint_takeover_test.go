package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// takeoverFixture is a real etcd holding Calico's automatic host
// endpoints as routedctl migrate calico carries them, and Kubernetes
// nodes (client-go's fake clientset) for routed-controllers to run on.
type takeoverFixture struct {
	t     *testing.T
	ctx   context.Context
	store *datastore.Client
	kube  *fake.Clientset
}

func newTakeoverFixture(t *testing.T, heps []*api.HostEndpoint, nodes ...*corev1.Node) *takeoverFixture {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &takeoverFixture{t: t, ctx: ctx, store: dstest.Client(t), kube: fake.NewClientset()}
	for _, h := range heps {
		if _, err := f.store.Create(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if _, err := f.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// calicoAutoHEP is Calico's "<node>-auto-hep" as carried: unowned, on
// "*", Calico's created-by label besides labels.
func calicoAutoHEP(node string, labels map[string]string, ips ...string) *api.HostEndpoint {
	l := map[string]string{CalicoCreatedByLabel: CalicoCreatedByValue}
	for k, v := range labels {
		l[k] = v
	}
	return &api.HostEndpoint{Metadata: api.ObjectMeta{Name: node + AutoHostEndpointSuffix, Labels: l},
		Spec: api.HostEndpointSpec{Node: node, InterfaceName: api.AllInterfaces, ExpectedIPs: ips, Profiles: []string{api.DefaultAllowProfile}}}
}

func kubeNode(name string, labels map[string]string, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

func (f *takeoverFixture) hep(name string) *api.HostEndpoint {
	r, err := f.store.Get(f.ctx, api.KindHostEndpoint, name)
	if err != nil {
		return nil
	}
	return r.(*api.HostEndpoint)
}

// run runs the controllers (automatic host endpoints on or off) until
// done reports nothing left to wait for.
func (f *takeoverFixture) run(on bool, done func() string) {
	f.t.Helper()
	cctx, stop := context.WithCancel(f.ctx)
	ended := make(chan error, 1)
	go func() {
		ended <- Run(cctx, Config{Kube: f.kube, Store: f.store, Identity: "t", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second,
			RetryPeriod: 200 * time.Millisecond, AutoHostEndpoints: on})
	}()
	testenv.Eventually(f.t, 30*time.Second, 100*time.Millisecond, done)
	stop()
	if err := <-ended; err != nil {
		f.t.Errorf("Run: %v", err)
	}
}

// refusedEvent is the Warning event recorded on node saying its
// endpoint was not taken over, "" while there is none.
func (f *takeoverFixture) refusedEvent(node string) string {
	evs, err := f.kube.CoreV1().Events("").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node && e.Reason == EventReasonNotTakenOver {
			return e.Message
		}
	}
	return ""
}

// TestAutoHostEndpointsKeepCalicosLabels (security review finding on
// ad1ca12): routed-controllers with the feature on do not take over
// Calico's <node>-auto-hep when rewriting it from the Kubernetes Node
// would remove a label (one only the Calico Node had, as `calicoctl
// label node role=ingress` gives in etcd mode), change a label's value
// or drop an expected IP (Calico's tunnel address): a policy selecting
// role == 'ingress' would stop policing the host. The endpoint stays as
// Calico wrote it, and a Warning event on the Node names what differs.
// Once the Node carries the label, it is taken over.
func TestAutoHostEndpointsKeepCalicosLabels(t *testing.T) {
	role := calicoAutoHEP("node2", map[string]string{"zone": "a", "role": "ingress"}, "10.0.0.2")
	zone := calicoAutoHEP("node3", map[string]string{"zone": "old"}, "10.0.0.3")
	tunnel := calicoAutoHEP("node4", map[string]string{"zone": "a"}, "10.0.0.4", "10.244.0.4")
	f := newTakeoverFixture(t, []*api.HostEndpoint{calicoAutoHEP("node1", map[string]string{"zone": "a"}, "10.0.0.1"), role, zone, tunnel},
		kubeNode("node1", map[string]string{"zone": "a"}, "10.0.0.1"), kubeNode("node2", map[string]string{"zone": "a"}, "10.0.0.2"),
		kubeNode("node3", map[string]string{"zone": "a"}, "10.0.0.3"), kubeNode("node4", map[string]string{"zone": "a"}, "10.0.0.4"))
	unchanged := func(want *api.HostEndpoint) string {
		h := f.hep(want.Metadata.Name)
		if h == nil || IsOwned(h) || !sameLabels(h.Metadata.Labels, want.Metadata.Labels) || !slices.Equal(h.Spec.ExpectedIPs, want.Spec.ExpectedIPs) {
			return fmt.Sprintf("%s was changed: %+v, want %+v", want.Metadata.Name, h, want)
		}
		return ""
	}
	f.run(true, func() string {
		if h := f.hep("node1-auto-hep"); h == nil || !IsOwned(h) {
			return "node1's endpoint, which loses nothing, not taken over"
		}
		for node, words := range map[string][]string{"node2": {"node2-auto-hep", "role=ingress"}, "node3": {"zone=old (would become a)"}, "node4": {"expectedIPs 10.244.0.4"}} {
			msg := f.refusedEvent(node)
			for _, w := range words {
				if !strings.Contains(msg, w) {
					return fmt.Sprintf("%s: event %q, want it to name %q", node, msg, w)
				}
			}
		}
		return ""
	})
	for _, h := range []*api.HostEndpoint{role, zone, tunnel} {
		if why := unchanged(h); why != "" {
			t.Error(why)
		}
	}

	n2, err := f.kube.CoreV1().Nodes().Get(f.ctx, "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2.Labels["role"] = "ingress"
	if _, err := f.kube.CoreV1().Nodes().Update(f.ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.run(true, func() string {
		if h := f.hep("node2-auto-hep"); h == nil || !IsOwned(h) || h.Metadata.Labels["role"] != "ingress" || h.Metadata.Annotations[AdoptedAnnotation] == "" {
			return fmt.Sprintf("node2's endpoint not taken over once its Node carries role=ingress: %+v", h)
		}
		return ""
	})
	for _, h := range []*api.HostEndpoint{zone, tunnel} {
		if why := unchanged(h); why != "" {
			t.Error(why)
		}
	}
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestAutoHostEndpointsOffReleasesAdopted (security review finding on
// ad1ca12): after routed-controllers took over Calico's <node>-auto-hep,
// running them with the feature off (a manifest re-applied without
// AUTO_HOST_ENDPOINTS) releases those: they stay, unowned, policing as
// last written, and turned on again are taken over again. The endpoints
// the controllers created themselves are removed when off, as before.
func TestAutoHostEndpointsOffReleasesAdopted(t *testing.T) {
	f := newTakeoverFixture(t, []*api.HostEndpoint{calicoAutoHEP("node1", map[string]string{"zone": "a"}, "10.0.0.1")},
		kubeNode("node1", map[string]string{"zone": "a", "role": "ingress"}, "10.0.0.1"), kubeNode("node2", nil, "10.0.0.2"))
	f.run(true, func() string {
		if h := f.hep("node1-auto-hep"); h == nil || !IsOwned(h) || h.Metadata.Annotations[AdoptedAnnotation] != CalicoCreatedByValue {
			return fmt.Sprintf("node1's endpoint not taken over: %+v", h)
		}
		if h := f.hep("node2-auto-hep"); h == nil || !IsOwned(h) || h.Metadata.Annotations[AdoptedAnnotation] != "" {
			return fmt.Sprintf("node2's endpoint not created as the controllers' own: %+v", h)
		}
		return ""
	})
	f.run(false, func() string {
		if f.hep("node2-auto-hep") != nil {
			return "the controllers' own endpoint still there with the feature off"
		}
		return ""
	})
	h := f.hep("node1-auto-hep")
	if h == nil || IsOwned(h) || len(h.Metadata.Annotations) != 0 || h.Metadata.Labels["role"] != "ingress" ||
		h.Metadata.Labels[CalicoCreatedByLabel] != CalicoCreatedByValue || !slices.Equal(h.Spec.ExpectedIPs, []string{"10.0.0.1"}) {
		t.Fatalf("off: the endpoint taken over from Calico was removed or not released: %+v", h)
	}
	f.run(true, func() string {
		if h := f.hep("node1-auto-hep"); h == nil || !IsOwned(h) || h.Metadata.Annotations[AdoptedAnnotation] != CalicoCreatedByValue {
			return fmt.Sprintf("on again: node1's endpoint not taken over again: %+v", h)
		}
		return ""
	})
}

// TestTakeOverWarnsOnce: a refused takeover records one Warning event
// per difference, however often it is synced, and another when the
// difference changes.
func TestTakeOverWarnsOnce(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	s := &syncer{recorder: rec}
	node := kubeNode("n", map[string]string{"zone": "a"}, "10.0.0.1")
	refused := map[string]string{}
	cur := calicoAutoHEP("n", map[string]string{"zone": "a", "role": "ingress"}, "10.0.0.1")
	for range 3 {
		if s.takeOver(node, refused)(cur, AutoHostEndpoint(node)) {
			t.Fatal("taken over although role=ingress would go")
		}
	}
	cur.Metadata.Labels["tier"] = "edge"
	if s.takeOver(node, refused)(cur, AutoHostEndpoint(node)) {
		t.Fatal("taken over although role and tier would go")
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 2 || !strings.Contains(got[0], "labels role=ingress") || strings.Contains(got[0], "tier") ||
		!strings.Contains(got[1], "labels role=ingress, tier=edge") {
		t.Errorf("events %q, want one per difference", got)
	}
}

func TestTakeoverLosses(t *testing.T) {
	cur := calicoAutoHEP("n", map[string]string{"zone": "old", "role": "ingress"}, "10.0.0.1", "10.244.0.1")
	l := TakeoverLosses(cur, AutoHostEndpoint(kubeNode("n", map[string]string{"zone": "a", "new": "x"}, "10.0.0.1")))
	if want := "labels role=ingress, zone=old (would become a); expectedIPs 10.244.0.1"; l.String() != want {
		t.Errorf("%q, want %q", l, want)
	}
	if l := TakeoverLosses(cur, cur); !l.Empty() {
		t.Errorf("itself: %v", l)
	}
}
