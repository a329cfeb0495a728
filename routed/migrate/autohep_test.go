package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// calicoHEP is a HostEndpoint as Calico stores it in etcd; created
// marks it as calico-kube-controllers mark theirs.
func calicoHEP(name, node, iface string, created bool, ips ...string) string {
	labels := `{"kubernetes.io/hostname":"` + node + `"}`
	if created {
		labels = `{"kubernetes.io/hostname":"` + node + `","projectcalico.org/created-by":"calico-kube-controllers"}`
	}
	return fmt.Sprintf(`{"kind":"HostEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":%q,"labels":%s},
	 "spec":{"node":%q,"interfaceName":%q,"expectedIPs":["%s"],"profiles":["projectcalico-default-allow"]}}`, name, labels, node, iface, strings.Join(ips, `","`))
}

// kcc is a KubeControllersConfiguration "default" as stored in etcd,
// hostEndpoint its controllers.node.hostEndpoint (JSON), in spec and,
// as calico-kube-controllers write it, status.runningConfig.
func kcc(hostEndpoint string) string {
	c := `{"controllers":{"node":{"syncLabels":"Enabled","hostEndpoint":` + hostEndpoint + `}}}`
	return `{"kind":"KubeControllersConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":` + c +
		`,"status":{"runningConfig":` + c + `}}`
}

func joined(ss []string) string { return strings.Join(ss, "\n") }

// TestEtcdAutoHostEndpoints: from Calico's etcd (a real one, as
// routed's), with calico-kube-controllers creating host endpoints for
// nodes. A template is a policy loss naming the endpoints made from it
// (refused, nothing written). Without one, the plan and the run say to
// run routed-controllers with AUTO_HOST_ENDPOINTS=true, the endpoints
// are carried as Calico wrote them, not routed-controllers' (so
// controllers running without the feature leave them policing), with
// the allow-all profile they name (which Calico never stores); a
// second run writes nothing. Then routed-controllers with the feature
// on take <node>-auto-hep over, and a later plan sees no conflict in it.
// With autoCreate Disabled, the note says to keep the feature off.
func TestEtcdAutoHostEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, to := dstest.Client(t), dstest.Client(t)
	putCalico(t, src, map[string]string{
		"ippools/p":                             `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p"},"spec":{"cidr":"10.246.0.0/16","blockSize":26}}`,
		"hostendpoints/node-a-auto-hep":         calicoHEP("node-a-auto-hep", "node-a", "*", true, "10.0.0.1"),
		"hostendpoints/node-a-tmpl-auto-hep":    calicoHEP("node-a-tmpl-auto-hep", "node-a", "", true, "10.0.0.1"),
		"hostendpoints/node-a-eth0":             calicoHEP("node-a-eth0", "node-a", "eth0", false, "10.0.0.1"),
		"kubecontrollersconfigurations/default": kcc(`{"autoCreate":"Enabled","templates":[{"generateName":"tmpl","interfaceCIDRs":["10.0.0.0/24"],"nodeSelector":"all()"}]}`),
	})
	rep, err := Calico(ctx, src, to, Options{DryRun: true})
	if !errors.Is(err, ErrPolicyLoss) {
		t.Fatalf("a template: %v, want %v", err, ErrPolicyLoss)
	}
	l, ok := lossNames(rep.PolicyLosses)["KubeControllersConfiguration default"]
	if !ok || len(rep.PolicyLosses) != 1 || !strings.Contains(l.Reason, `template "tmpl"`) || !strings.Contains(l.Consequence, "node-a-tmpl-auto-hep") {
		t.Errorf("losses %v, want only the template, naming the endpoint made from it", rep.PolicyLosses)
	}
	if written(t, to) != 0 {
		t.Fatal("a refused plan wrote")
	}

	putCalico(t, src, map[string]string{"kubecontrollersconfigurations/default": kcc(`{"autoCreate":"Enabled"}`)})
	var created []string
	run := func() *Report {
		t.Helper()
		created = nil
		rep, err := Calico(ctx, src, to, Options{Progress: func(it Item) { created = append(created, string(it.Kind)+" "+it.Name) }})
		if err != nil {
			t.Fatalf("%v; losses %v", err, rep.PolicyLosses)
		}
		return rep
	}
	rep = run()
	notes := joined(rep.Notes)
	if !strings.Contains(notes, "AUTO_HOST_ENDPOINTS=true") || !strings.Contains(notes, "node-a-auto-hep") || !strings.Contains(notes, "status.runningConfig") {
		t.Errorf("notes %q, want what to run for node-a-auto-hep", rep.Notes)
	}
	if !strings.Contains(joined(rep.Warnings), "expectedIPs routed-controllers give the 1 <node>-auto-hep") {
		t.Errorf("warnings %q, want the expectedIPs not checked", rep.Warnings)
	}
	if strings.Contains(joined(rep.Skipped), "kubecontrollersconfigurations (") {
		t.Errorf("the configuration is still listed as not read: %q", rep.Skipped)
	}
	// The profile before the endpoints naming it.
	if i, j := slices.Index(created, "Profile projectcalico-default-allow"), slices.Index(created, "HostEndpoint node-a-auto-hep"); i < 0 || j < i {
		t.Errorf("written %q: want the allow-all profile, then the endpoint", created)
	}
	hep := func() *api.HostEndpoint {
		r, err := to.Get(ctx, api.KindHostEndpoint, "node-a-auto-hep")
		if err != nil {
			t.Fatal(err)
		}
		return r.(*api.HostEndpoint)
	}
	if h := hep(); controllers.IsOwned(h) || h.Metadata.Labels[controllers.CalicoCreatedByLabel] != controllers.CalicoCreatedByValue ||
		!slices.Equal(h.Spec.ExpectedIPs, []string{"10.0.0.1"}) {
		t.Errorf("carried %+v, want Calico's, unowned", h)
	}
	if p, err := to.Get(ctx, api.KindProfile, api.DefaultAllowProfile); err != nil || !controllers.IsOwned(p) {
		t.Errorf("profile %s: %v %v, want routed-controllers'", api.DefaultAllowProfile, p, err)
	}
	if run(); len(created) != 0 {
		t.Errorf("a second run wrote %q", created)
	}

	// routed-controllers with the feature on take it over.
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"kubernetes.io/hostname": "node-a"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}})
	cctx, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() {
		ended <- controllers.Run(cctx, controllers.Config{Kube: kube, Store: to, Identity: "t", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second,
			RetryPeriod: 200 * time.Millisecond, AutoHostEndpoints: true})
	}()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if h := hep(); !controllers.IsOwned(h) || h.Metadata.Annotations[controllers.AdoptedAnnotation] == "" || !slices.Equal(h.Spec.ExpectedIPs, []string{"10.0.0.1"}) {
			return fmt.Sprintf("not taken over: %+v", h)
		}
		return ""
	})
	stop()
	if err := <-ended; err != nil {
		t.Errorf("controllers: %v", err)
	}
	rep, err = Calico(ctx, src, to, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rep.Items {
		if it.Name == "node-a-auto-hep" && (it.Action != "unchanged" || !strings.Contains(it.Detail, "routed-controllers keep it") || !strings.Contains(it.Detail, "they release it")) {
			t.Errorf("after the take-over: %+v", it)
		}
	}

	putCalico(t, src, map[string]string{"kubecontrollersconfigurations/default": kcc(`{"autoCreate":"Disabled"}`)})
	rep, err = Calico(ctx, src, to, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := joined(rep.Notes); !strings.Contains(n, "has not autoCreate Enabled") || !strings.Contains(n, "Keep routed-controllers' AUTO_HOST_ENDPOINTS off") ||
		!strings.Contains(n, "they release the <node>-auto-hep they took over") {
		t.Errorf("notes %q, want the feature kept off", rep.Notes)
	}
}

// TestKubeAutoHostEndpoints: from the Kubernetes datastore, the
// configuration calico-kube-controllers run (status.runningConfig:
// their environment turned autoCreate on over the spec's Disabled)
// decides; a <node>-auto-hep whose expectedIPs routed-controllers would
// change (Calico listed the node's tunnel address) is a policy loss
// naming the address, one they would keep is none; a template is a
// loss; createDefaultHostEndpoint Disabled says to keep the feature off.
// Accepted, the run carries the endpoints unowned and the allow-all
// profile into a real etcd, and a second run writes nothing.
func TestKubeAutoHostEndpoints(t *testing.T) {
	ctx := context.Background()
	kubeNode := func(name, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	hep := func(name, node, iface string, ips ...any) *unstructured.Unstructured {
		u := object(calicoCRDv1, "HostEndpoint", name, map[string]any{"node": node, "interfaceName": iface, "expectedIPs": ips,
			"profiles": []any{api.DefaultAllowProfile}})
		u.SetLabels(map[string]string{"kubernetes.io/hostname": node, controllers.CalicoCreatedByLabel: controllers.CalicoCreatedByValue})
		return u
	}
	config := func(spec, running map[string]any) *unstructured.Unstructured {
		u := object(calicoCRDv1, "KubeControllersConfiguration", "default", map[string]any{"controllers": map[string]any{"node": map[string]any{"hostEndpoint": spec}}})
		u.Object["status"] = map[string]any{"runningConfig": map[string]any{"controllers": map[string]any{"node": map[string]any{"hostEndpoint": running}}},
			"environmentVars": map[string]any{"AUTO_HOST_ENDPOINTS": "enabled"}}
		return u
	}
	heps := []*unstructured.Unstructured{hep("node-a-auto-hep", "node-a", "*", "10.0.0.1", "10.244.0.1"), hep("node-b-auto-hep", "node-b", "*", "10.0.0.2"),
		hep("node-b-tmpl-eth0-auto-hep", "node-b", "eth0", "10.0.0.2")}
	nodes := []runtime.Object{kubeNode("node-a", "10.0.0.1"), kubeNode("node-b", "10.0.0.2")}
	disabled := map[string]any{"autoCreate": "Disabled"}
	for _, tc := range []struct {
		name    string
		running map[string]any
		losses  map[string]string // "<kind> <name>": a word of it
		note    string
	}{
		{"environment on", map[string]any{"autoCreate": "Enabled"},
			map[string]string{"HostEndpoint node-a-auto-hep": "[10.244.0.1]"}, "AUTO_HOST_ENDPOINTS=true"},
		{"a template", map[string]any{"autoCreate": "Enabled", "templates": []any{map[string]any{"generateName": "tmpl", "interfacePattern": "eth.*"}}},
			map[string]string{"HostEndpoint node-a-auto-hep": "[10.244.0.1]", "KubeControllersConfiguration default": "node-b-tmpl-eth0-auto-hep"}, "AUTO_HOST_ENDPOINTS=true"},
		{"no default endpoint", map[string]any{"autoCreate": "Enabled", "createDefaultHostEndpoint": "Disabled"}, nil, "Keep routed-controllers' AUTO_HOST_ENDPOINTS off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeCluster{gv: calicoCRDv1, kube: nodes, objs: append(slices.Clone(heps), config(disabled, tc.running))}
			src, _, _ := c.source()
			st, err := src.read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := lossNames(st.losses)
			for name, word := range tc.losses {
				if l, ok := got[name]; !ok || !strings.Contains(l.String(), word) {
					t.Errorf("%s: %v, want a loss saying %q", name, l, word)
				}
			}
			if len(got) != len(tc.losses) {
				t.Errorf("losses %v, want %d", st.losses, len(tc.losses))
			}
			if n := joined(st.notes); !strings.Contains(n, tc.note) || !strings.Contains(n, "status.runningConfig") {
				t.Errorf("notes %q, want %q from status.runningConfig", st.notes, tc.note)
			}
		})
	}

	to := dstest.Client(t)
	migrate := func() []string {
		t.Helper()
		c := fakeCluster{gv: calicoCRDv1, kube: nodes, objs: append(slices.Clone(heps), config(disabled, map[string]any{"autoCreate": "Enabled"}))}
		src, _, _ := c.source()
		st, err := src.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var created []string
		if _, err := carry(ctx, to, st, Options{AcceptPolicyLoss: true, Progress: func(it Item) { created = append(created, it.Name) }}); err != nil {
			t.Fatal(err)
		}
		return created
	}
	if created := migrate(); !slices.Contains(created, api.DefaultAllowProfile) || !slices.Contains(created, "node-a-auto-hep") {
		t.Errorf("written %q", created)
	}
	for _, name := range []string{"node-a-auto-hep", "node-b-auto-hep", "node-b-tmpl-eth0-auto-hep"} {
		r, err := to.Get(ctx, api.KindHostEndpoint, name)
		if err != nil || controllers.IsOwned(r) {
			t.Errorf("%s: %v %v, want Calico's, unowned", name, r, err)
		}
	}
	if created := migrate(); len(created) != 0 {
		t.Errorf("a second run wrote %q", created)
	}
}

// TestEtcdAutoHostEndpointLabels (security review finding on e8e9e96):
// from etcd, Calico's <node>-auto-hep copies its Calico Node's labels,
// which may hold one set with `calicoctl label node` (role=ingress)
// besides those copied from Kubernetes (recorded in the Calico Node's
// projectcalico.org/kube-labels). routed-controllers write only the
// Kubernetes ones, so the endpoint's extra label is a policy loss naming
// it (the plan is refused); an endpoint whose Calico Node has no such
// record is a warning saying its labels could not be checked. A spec
// and status.runningConfig that disagree are a warning naming both.
func TestEtcdAutoHostEndpointLabels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, to := dstest.Client(t), dstest.Client(t)
	calicoNode := func(name, annotations string) string {
		return `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"` + name + `","labels":{"kubernetes.io/hostname":"` + name + `","role":"ingress"}` + annotations +
			`},"spec":{"bgp":{"ipv4Address":"10.0.0.1/24"},"orchRefs":[{"nodeName":"` + name + `","orchestrator":"k8s"}]}}`
	}
	hep := func(node string) string {
		return fmt.Sprintf(`{"kind":"HostEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"%s-auto-hep","labels":{"kubernetes.io/hostname":%q,"role":"ingress","projectcalico.org/created-by":"calico-kube-controllers"}},
		 "spec":{"node":%q,"interfaceName":"*","expectedIPs":["10.0.0.1"],"profiles":["projectcalico-default-allow"]}}`, node, node, node)
	}
	putCalico(t, src, map[string]string{
		"nodes/node-a":                  calicoNode("node-a", `,"annotations":{"projectcalico.org/kube-labels":"{\"kubernetes.io/hostname\":\"node-a\"}"}`),
		"nodes/node-b":                  calicoNode("node-b", ""),
		"hostendpoints/node-a-auto-hep": hep("node-a"),
		"hostendpoints/node-b-auto-hep": hep("node-b"),
		"kubecontrollersconfigurations/default": `{"kind":"KubeControllersConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},` +
			`"spec":{"controllers":{"node":{"hostEndpoint":{"autoCreate":"Disabled"}}}},"status":{"runningConfig":{"controllers":{"node":{"hostEndpoint":{"autoCreate":"Enabled"}}}}}}`,
	})
	rep, err := Calico(ctx, src, to, Options{DryRun: true})
	if !errors.Is(err, ErrPolicyLoss) {
		t.Fatalf("a label routed-controllers would remove: %v, want %v", err, ErrPolicyLoss)
	}
	got := lossNames(rep.PolicyLosses)
	if l, ok := got["HostEndpoint node-a-auto-hep"]; !ok || !strings.Contains(l.Reason, "role=ingress") || !strings.Contains(l.Reason, "projectcalico.org/kube-labels") ||
		!strings.Contains(l.Consequence, "do not take it over") {
		t.Errorf("node-a-auto-hep: %v, want a loss naming role=ingress", l)
	}
	if len(rep.PolicyLosses) != 1 {
		t.Errorf("losses %v, want only node-a-auto-hep's", rep.PolicyLosses)
	}
	w := joined(rep.Warnings)
	if !strings.Contains(w, "labels of 1 <node>-auto-hep (node-b-auto-hep) could not be checked") {
		t.Errorf("warnings %q, want node-b-auto-hep's labels not checked", rep.Warnings)
	}
	if !strings.Contains(w, "spec sets host endpoints to autoCreate Disabled") || !strings.Contains(w, "status.runningConfig (what calico-kube-controllers run, their environment such as AUTO_HOST_ENDPOINTS overriding the spec) to autoCreate Enabled") {
		t.Errorf("warnings %q, want the spec and runningConfig named", rep.Warnings)
	}
	if written(t, to) != 0 {
		t.Fatal("a refused plan wrote")
	}
}

// TestKubeAutoHostEndpointLabels (security review finding on e8e9e96):
// from the Kubernetes datastore, a <node>-auto-hep holding a label the
// Kubernetes Node lacks, or another value, is a policy loss naming it:
// routed-controllers write the Node's labels and would remove it. One
// that only gains labels is none.
func TestKubeAutoHostEndpointLabels(t *testing.T) {
	hep := func(node string, labels map[string]string) *unstructured.Unstructured {
		u := object(calicoCRDv1, "HostEndpoint", node+"-auto-hep", map[string]any{"node": node, "interfaceName": "*", "expectedIPs": []any{"10.0.0.1"},
			"profiles": []any{api.DefaultAllowProfile}})
		labels[controllers.CalicoCreatedByLabel] = controllers.CalicoCreatedByValue
		u.SetLabels(labels)
		return u
	}
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}
	}
	config := object(calicoCRDv1, "KubeControllersConfiguration", "default", map[string]any{"controllers": map[string]any{"node": map[string]any{"hostEndpoint": map[string]any{"autoCreate": "Enabled"}}}})
	c := fakeCluster{gv: calicoCRDv1,
		kube: []runtime.Object{node("node-a", map[string]string{"zone": "a"}), node("node-b", map[string]string{"zone": "b"}), node("node-c", map[string]string{"zone": "c", "new": "x"})},
		objs: []*unstructured.Unstructured{hep("node-a", map[string]string{"zone": "a", "role": "ingress"}), hep("node-b", map[string]string{"zone": "old"}),
			hep("node-c", map[string]string{"zone": "c"}), config}}
	src, _, _ := c.source()
	st, err := src.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := lossNames(st.losses)
	for name, word := range map[string]string{"HostEndpoint node-a-auto-hep": "role=ingress", "HostEndpoint node-b-auto-hep": "zone=old (would become b)"} {
		if l, ok := got[name]; !ok || !strings.Contains(l.Reason, word) || !strings.Contains(l.Reason, "Kubernetes Node") {
			t.Errorf("%s: %v, want a loss naming %q", name, l, word)
		}
	}
	if len(st.losses) != 2 {
		t.Errorf("losses %v, want node-a's and node-b's only", st.losses)
	}
}
