package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/controllers"
	"github.com/routed-net/routed/tests/k8s/enforce"
)

// BenchmarkControllersPath times the controllers' share of enforcement
// time (make k8s-policy-bench: API request -> new verdict on both
// nodes): from the API request to the watch event of what
// routed-controllers wrote arriving from routed's etcd, with a real
// kube-apiserver and etcd, for a NetworkPolicy created and deleted and a
// pod's label added and removed (CONTROLLERS_PATH_N of each, 50 by
// default). What k8s-policy-bench measures beyond this is the nodes'
// part: their feed, felix and nftables, and the probes.
// Run: go test -run '^$' -bench ControllersPath -benchtime 1x ./tests/k8s
func BenchmarkControllersPath(b *testing.B) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("CONTROLLERS_PATH_N")); err == nil && v > 0 {
		n = v
	}
	srv := cluster(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	store := dstest.Client(b)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		b.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		b.Fatal(err)
	}
	// The controllers' client has client-go's default rate limit, as
	// routed-controllers does; the benchmark's own requests must not
	// wait on one (at 5 requests/s they would, and that would be timed).
	ctlKube := kubernetes.NewForConfigOrDie(rc)
	rc.QPS, rc.Burst = 100, 200
	kube := kubernetes.NewForConfigOrDie(rc)
	ns := fmt.Sprintf("path-%d", time.Now().UnixNano()%100000)
	wepName := api.WorkloadEndpointName("node1", "k8s", ns, "client", "", "eth0")
	if _, err := store.Create(ctx, &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: wepName},
		Spec: api.WorkloadEndpointSpec{Node: "node1", Orchestrator: "k8s", Namespace: ns, Pod: "client", ContainerID: "c1",
			InterfaceName: "cali12345678901", IPNetworks: []string{"10.9.0.5/32"}}}); err != nil {
		b.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// No controller-manager here creates the default service account.
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client", Labels: map[string]string{"app": "client"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}

	evs := make(chan arrival, 1024)
	sctx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	for _, k := range []api.Kind{api.KindNetworkPolicy, api.KindWorkloadEndpoint} {
		go func() { _ = store.Stream(sctx, datastore.KindPrefix(k), arrivals(evs), datastore.StreamOptions{}) }()
	}
	stop := startControllers(ctx, b, controllers.Config{Kube: ctlKube, Store: store, LeaseName: ns})
	defer stop()

	labelled := func(want bool) func(a arrival) bool {
		return func(a arrival) bool {
			return strings.HasSuffix(a.key, wepName) && !a.deleted && bytes.Contains(a.value, []byte(`"access":"yes"`)) == want
		}
	}
	// The endpoint has the pod's labels: the controllers lead.
	if _, err := waitArrival(ctx, evs, time.Now(), func(a arrival) bool {
		return strings.HasSuffix(a.key, wepName) && bytes.Contains(a.value, []byte(`"app":"client"`))
	}); err != nil {
		b.Fatalf("the endpoint never got its pod's labels: %v", err)
	}

	policy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	isPolicy := func(deleted bool) func(a arrival) bool {
		return func(a arrival) bool {
			return strings.HasSuffix(a.key, "knp.default.bench-deny") && a.deleted == deleted
		}
	}
	var created, deleted, added, removed, patched []time.Duration
	b.ResetTimer()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		d, err := waitArrival(ctx, evs, t0, isPolicy(false))
		if err != nil {
			b.Fatalf("create %d: %v", i, err)
		}
		created = append(created, d)
		t0 = time.Now()
		if err := kube.NetworkingV1().NetworkPolicies(ns).Delete(ctx, policy.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		if d, err = waitArrival(ctx, evs, t0, isPolicy(true)); err != nil {
			b.Fatalf("delete %d: %v", i, err)
		}
		deleted = append(deleted, d)
		for _, add := range []bool{true, false} {
			patch := `{"metadata":{"labels":{"access":"yes"}}}`
			if !add {
				patch = `{"metadata":{"labels":{"access":null}}}`
			}
			t0 = time.Now()
			if _, err := kube.CoreV1().Pods(ns).Patch(ctx, "client", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				b.Fatal(err)
			}
			patched = append(patched, time.Since(t0))
			if d, err = waitArrival(ctx, evs, t0, labelled(add)); err != nil {
				b.Fatalf("label %d (add %v): %v", i, add, err)
			}
			if add {
				added = append(added, d)
			} else {
				removed = append(removed, d)
			}
		}
	}
	b.StopTimer()
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("API request -> the controllers' write seen in routed's etcd (load %s):", strings.Join(strings.Fields(string(load))[:3], " "))
	for _, s := range []struct {
		name string
		ds   []time.Duration
	}{{"policy created", created}, {"policy deleted", deleted}, {"label added", added}, {"label removed", removed}, {"label patch returned", patched}} {
		b.Logf("  %s", enforce.Summary(s.name, s.ds))
		b.ReportMetric(float64(enforce.Percentile(s.ds, 50).Microseconds())/1000, strings.ReplaceAll(s.name, " ", "-")+"-p50-ms")
	}
}

// arrival is one watch event and when it arrived.
type arrival struct {
	key     string
	value   []byte
	deleted bool
	at      time.Time
}

// arrivals is a datastore.StreamHandler that stamps every watch event.
type arrivals chan<- arrival

// OnList implements datastore.StreamHandler; the listing is the state
// before the benchmark.
func (a arrivals) OnList([]*mvccpb.KeyValue, int64, datastore.ListReason) {}

// OnEvents implements datastore.StreamHandler.
func (a arrivals) OnEvents(evs []*clientv3.Event, _ int64) {
	now := time.Now()
	for _, ev := range evs {
		a <- arrival{key: string(ev.Kv.Key), value: ev.Kv.Value, deleted: ev.Type == clientv3.EventTypeDelete, at: now}
	}
}

// waitArrival returns how long after t0 the first event that done
// accepts arrived; events before it are dropped.
func waitArrival(ctx context.Context, evs <-chan arrival, t0 time.Time, done func(arrival) bool) (time.Duration, error) {
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case a := <-evs:
			if done(a) {
				return a.at.Sub(t0), nil
			}
		case <-timeout.C:
			return 0, fmt.Errorf("no such event within 30 s")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
