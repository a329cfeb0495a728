package feed_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/routed/controllers"
)

// The policies and network sets BenchmarkKeptResources adds to the big
// cluster (scale-big's defaults: a quarter of the policies global).
const (
	keptPolicies = 2000
	keptNetsets  = 500
)

// confdKinds are confd.Kinds (not imported: confd imports feed).
var confdKinds = []api.Kind{api.KindNode, api.KindBGPConfiguration, api.KindBGPPeer, api.KindBGPFilter, api.KindIPPool,
	api.KindWorkloadEndpoint, api.KindProfile}

// BenchmarkKeptResources measures the pages a node keeps in use for the
// decoded resources its consumers hold whole after the start-up list
// (every kind but endpoints: Nodes, profiles, policies, network sets,
// pools), on real etcd in another process. The cluster is
// BenchmarkFeedMemory's with scale-big's 2,000 policies and 500 network
// sets; two consumers subscribe as the daemon's do: felix (its kinds;
// it makes its policy records of every endpoint, as
// BenchmarkEndpointRecords does, and keeps every other resource) and
// confd (its kinds, this node's endpoints only; it keeps every resource).
// Once both have their snapshot the feed is stopped and dropped; per run
// it reports the heap in use (pages holding objects), the live heap and
// the heap objects, after two collections, against before the feed
// started; then what each part holds, dropped in turn (the kept
// resources kind by kind, then felix's records): what the figures fall
// by. Pages fall only when every object on them goes, so a part whose
// objects sit among another's holds more than its drop frees. Run it at
// the daemon's start-up GOGC (20):
//
//	GOGC=20 ROUTED_FEED_BENCH_PODS=150000 ROUTED_FEED_BENCH_RUNS=1 \
//	  go test ./pkg/feed -run '^$' -bench KeptResources -benchtime 1x -timeout 30m
func BenchmarkKeptResources(b *testing.B) {
	pods := envPods(b)
	runs := envRuns(b)
	ds := childEtcdClient(b)
	t0 := time.Now()
	writeBigCluster(b, ds, pods)
	writeKeptExtras(b, ds, pods/podsPerNS+1)
	b.Logf("wrote %d pods on %d nodes, %d policies, %d network sets in %v", pods, pods/podsPerNode, keptPolicies, keptNetsets,
		time.Since(t0).Round(time.Millisecond))
	for i := 0; i < b.N; i++ {
		for r := range runs {
			base := memStats()
			fx := &keptConsumer{records: &recordsConsumer{node: benchNodeName(0), calc: policy.NewCalc(nopSink{}, policy.LogConfig{})},
				kept: map[string]api.Resource{}}
			cd := &keptConsumer{kept: map[string]api.Resource{}}
			fd := feed.New(ds, feed.Options{})
			fd.Subscribe("felix", felixKinds, fx)
			fd.Subscribe("confd", confdKinds, cd, feed.OnlyNames(api.KindWorkloadEndpoint, func(name string) bool {
				return api.IsNodeWorkloadEndpointName(name, benchNodeName(0))
			}))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = fd.Run(ctx); close(done) }()
			testenv.Eventually(b, 10*time.Minute, 5*time.Millisecond, func() string {
				if fx.done.Load() == 0 || cd.done.Load() == 0 {
					return "felix or confd has no snapshot yet"
				}
				return ""
			})
			cancel()
			<-done
			fd = nil
			after := memStats()
			if fx.records.endpoints != pods {
				b.Fatalf("run %d: %d endpoint records, want %d (refused: %d)", r, fx.records.endpoints, pods, fx.records.refused)
			}
			inuse, live := after.HeapInuse-base.HeapInuse, after.HeapAlloc-base.HeapAlloc
			objects := after.HeapObjects - base.HeapObjects
			b.Logf("run %d: felix keeps %d resources and %d endpoint records, confd %d resources; heap in use %.1f MiB, live %.1f MiB, %d objects",
				r, len(fx.kept), fx.records.endpoints, len(cd.kept), mib(inuse), mib(live), objects)
			b.ReportMetric(mib(inuse), "inuse-MiB")
			b.ReportMetric(mib(live), "live-MiB")
			b.ReportMetric(float64(objects), "objects")
			// What each part holds: the figures fall by it when it is
			// dropped (pages only when all their objects go), kind by
			// kind, then felix's records.
			prev, kept := after, memStats()
			for _, k := range []api.Kind{api.KindNode, api.KindProfile, api.KindNetworkPolicy, api.KindGlobalNetworkPolicy, ""} {
				n := dropKept(k, fx, cd)
				now := memStats()
				b.Logf("run %d: dropping %d kept %s frees %.1f MiB in use, %.1f MiB live, %d objects", r, n, cmp.Or(string(k), "others"),
					mib(prev.HeapInuse-now.HeapInuse), mib(prev.HeapAlloc-now.HeapAlloc), prev.HeapObjects-now.HeapObjects)
				prev, kept = now, now
			}
			b.ReportMetric(mib(after.HeapInuse-kept.HeapInuse), "kept-inuse-MiB")
			b.ReportMetric(mib(after.HeapAlloc-kept.HeapAlloc), "kept-live-MiB")
			fx.records = nil
			now := memStats()
			b.Logf("run %d: dropping felix's records then frees %.1f MiB in use, %.1f MiB live, %d objects; %.1f MiB in use, %.1f MiB live stay",
				r, mib(kept.HeapInuse-now.HeapInuse), mib(kept.HeapAlloc-now.HeapAlloc), kept.HeapObjects-now.HeapObjects,
				(float64(now.HeapInuse)-float64(base.HeapInuse))/(1<<20), (float64(now.HeapAlloc)-float64(base.HeapAlloc))/(1<<20))
		}
	}
}

// envRuns is how many start-up lists a benchmark makes in one process
// (benchRunsEnv; 1 unless set).
func envRuns(b *testing.B) int {
	b.Helper()
	v := 1
	if s := os.Getenv(benchRunsEnv); s != "" {
		v, _ = strconv.Atoi(s)
	}
	if v < 1 {
		b.Fatalf("%s: want a number of runs >= 1", benchRunsEnv)
	}
	return v
}

// keptConsumer keeps every resource of its snapshot but endpoints whole,
// as confd and felix do; with records set it makes felix's records of
// the endpoints too.
type keptConsumer struct {
	records *recordsConsumer
	kept    map[string]api.Resource
	done    atomic.Int64
}

func (c *keptConsumer) OnBatch(b feed.Batch) {
	if !b.Snapshot {
		return
	}
	for _, u := range b.Updates {
		if u.Resource != nil && u.Kind != api.KindWorkloadEndpoint {
			c.kept[string(u.Kind)+"/"+u.Name] = u.Resource
		}
	}
	if c.records != nil {
		c.records.OnBatch(b)
	}
	c.done.Store(1)
}

// dropKept drops what the consumers keep of kind k (every kind when k
// is empty) and says how many resources that was.
func dropKept(k api.Kind, cs ...*keptConsumer) int {
	n := 0
	for _, c := range cs {
		for key, r := range c.kept {
			if k == "" || r.GetKind() == k {
				delete(c.kept, key)
				n++
			}
		}
	}
	return n
}

// writeKeptExtras writes scale-big's policies (a quarter global) and
// network sets (one in five global) over namespaces namespaces.
func writeKeptExtras(b *testing.B, ds *datastore.Client, namespaces int) {
	b.Helper()
	var rs []api.Resource
	gnps := keptPolicies / 4
	for i := range keptPolicies {
		if i < gnps {
			rs = append(rs, keptGlobalPolicy(i))
		} else {
			rs = append(rs, keptNetworkPolicy(i, namespaces))
		}
	}
	for i := range keptNetsets {
		labels := map[string]string{"netset-role": fmt.Sprintf("external-%d", i%20)}
		nets := []string{fmt.Sprintf("198.18.%d.0/24", i%256), fmt.Sprintf("198.19.%d.%d/28", i%256, 16*(i%16))}
		if i%5 == 0 {
			rs = append(rs, &api.GlobalNetworkSet{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkSet},
				Metadata: api.ObjectMeta{Name: fmt.Sprintf("gns-%d", i), Labels: labels}, Spec: api.NetworkSetSpec{Nets: nets}})
			continue
		}
		rs = append(rs, &api.NetworkSet{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNetworkSet},
			Metadata: api.ObjectMeta{Name: fmt.Sprintf("ns-set-%d", i), Namespace: benchPod((i % namespaces) * podsPerNS).ns(), Labels: labels},
			Spec:     api.NetworkSetSpec{Nets: nets}})
	}
	for _, r := range rs { // stored as written, as BenchmarkFeedMemory stores the rest (no tier is made)
		key, val, err := datastore.Encode(r)
		if err == nil {
			_, err = ds.Etcd().Put(context.Background(), key, string(val))
		}
		if err != nil {
			b.Fatalf("%s %s: %v", r.GetKind(), r.Meta().Name, err)
		}
	}
}

// keptGlobalPolicy is scale-big's GlobalNetworkPolicy i.
func keptGlobalPolicy(i int) *api.GlobalNetworkPolicy {
	tcp := api.ProtocolFromName(api.ProtocolTCP)
	order := float64(100 + i%400)
	p := &api.GlobalNetworkPolicy{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
		Metadata: api.ObjectMeta{Name: fmt.Sprintf("gnp-%d", i)}}
	tier := [3]string{"frontend", "backend", "db"}[i%3]
	p.Spec.Order = &order
	p.Spec.Selector = fmt.Sprintf("has(app) && tier == '%s' && app == 'app-%d'", tier, i%5)
	p.Spec.NamespaceSelector = fmt.Sprintf("team == 'team-%d'", i%50)
	p.Spec.Types = []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
	p.Spec.Ingress = []api.Rule{{Action: api.ActionAllow, Protocol: &tcp,
		Source:      api.EntityRule{Selector: fmt.Sprintf("app == 'app-%d'", (i+1)%5), NamespaceSelector: "env == 'prod'"},
		Destination: api.EntityRule{Ports: []api.Port{api.NamedPort("metrics"), api.SinglePort(uint16(9000 + i%100))}}}}
	if i%4 == 0 {
		p.Spec.Ingress = append([]api.Rule{{Action: api.ActionDeny, Source: api.EntityRule{Selector: "tier == 'db'"}}}, p.Spec.Ingress...)
	}
	p.Spec.Egress = []api.Rule{
		{Action: api.ActionAllow, Protocol: &tcp, Destination: api.EntityRule{Selector: fmt.Sprintf("netset-role == 'external-%d'", i%20)}},
		{Action: api.ActionAllow, Destination: api.EntityRule{Selector: "tier == 'backend'", NamespaceSelector: fmt.Sprintf("team == 'team-%d'", (i+1)%50)}},
	}
	return p
}

// keptNetworkPolicy is scale-big's Kubernetes NetworkPolicy i as
// routed-controllers converts it.
func keptNetworkPolicy(i, namespaces int) *api.NetworkPolicy {
	app := func(k int) map[string]string { return map[string]string{"app": fmt.Sprintf("app-%d", k%5)} }
	peer := func(ns, pods map[string]string) networkingv1.NetworkPolicyPeer {
		var p networkingv1.NetworkPolicyPeer
		if ns != nil {
			p.NamespaceSelector = &metav1.LabelSelector{MatchLabels: ns}
		}
		if pods != nil {
			p.PodSelector = &metav1.LabelSelector{MatchLabels: pods}
		}
		return p
	}
	tcp := corev1.ProtocolTCP
	port := func(p intstr.IntOrString) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("np-%d", i), Namespace: benchPod((i % namespaces) * podsPerNS).ns()},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: app(i)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{peer(nil, app(i+1))}, Ports: port(intstr.FromString("http"))},
				{From: []networkingv1.NetworkPolicyPeer{peer(map[string]string{"team": fmt.Sprintf("team-%d", i%50)}, map[string]string{"tier": "frontend"})},
					Ports: port(intstr.FromInt32(int32(8080 + i%3)))},
			},
		},
	}
	if i%3 == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{peer(map[string]string{"env": "prod"}, map[string]string{"tier": "db"})}, Ports: port(intstr.FromString("db"))},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("198.18.%d.0/24", i%256)}}}},
		}
	}
	return controllers.ConvertNetworkPolicy(np).Policy
}
