package felix

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// bigCluster is the datastore of a big cluster as felix on one node
// ("node-0") receives it from the feed: eps WorkloadEndpoints on nodes
// Nodes in namespaces namespaces, with the namespace and service account
// profiles the controllers write, policies NetworkPolicies and
// GlobalNetworkPolicies, and a few global network sets.
//
// The pods are shaped like a real cluster's: a tenth are three
// DaemonSets' (one pod per node each, in kube-system, monitoring and
// logging); the rest are spread over the other namespaces, about 75 per
// namespace, as Deployments of 8 replicas (app, app.kubernetes.io/*,
// pod-template-hash; a tenth mid-rollout with two hashes), except that
// every tenth namespace runs a StatefulSet (a pod-name label of its own
// per pod) in place of its first Deployment. Every pod has Calico's
// identity labels and profiles (api.PodIdentity), one or two named
// ports and one IPv4 address.
//
// Every resource is encoded and decoded as the feed decodes it, so that
// no two share a string (the decoder allocates each one).
type bigCluster struct {
	eps, nodes, namespaces, policies int
}

var (
	bigSystemNS = []string{"kube-system", "monitoring", "logging"}
	bigDS       = []string{"kube-proxy", "node-exporter", "fluent-bit"}
	bigApps     = []string{"api", "web", "worker", "cache", "frontend", "backend", "queue", "auth", "search", "billing"}
)

func bigHash(parts ...any) string {
	h := fnv.New64a()
	fmt.Fprint(h, parts...)
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	v := h.Sum64()
	out := make([]byte, 10)
	for i := range out {
		out[i] = alphabet[v%uint64(len(alphabet))]
		v /= uint64(len(alphabet))
	}
	return string(out)
}

func (c bigCluster) nsName(i int) string {
	if i < len(bigSystemNS) {
		return bigSystemNS[i]
	}
	return fmt.Sprintf("team%02d-svc%04d", i%40, i)
}

// dsPods is how many pods are the DaemonSets'.
func (c bigCluster) dsPods() int { return min(len(bigDS)*c.nodes, c.eps/10) }

// decode encodes r and decodes it as the feed does.
func decodeAsFeed(tb testing.TB, r api.Resource) api.Resource {
	b, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := datastore.Decode(r.GetKind(), b, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// endpoint returns pod i's WorkloadEndpoint.
func (c bigCluster) endpoint(i int) *api.WorkloadEndpoint {
	var ns, app, sa, pod string
	var node int
	labels := map[string]string{}
	var ports []api.WorkloadEndpointPort
	http := api.WorkloadEndpointPort{Name: "http", Protocol: api.ProtocolFromName(api.ProtocolTCP), Port: 8080}
	metrics := api.WorkloadEndpointPort{Name: "metrics", Protocol: api.ProtocolFromName(api.ProtocolTCP), Port: 9090}
	if ds := c.dsPods(); i < ds {
		d := i % len(bigDS)
		ns, app, node = bigSystemNS[d], bigDS[d], (i/len(bigDS))%c.nodes
		labels["k8s-app"] = app
		labels["controller-revision-hash"] = bigHash(app)[:9]
		labels["pod-template-generation"] = "1"
		pod = app + "-" + bigHash(i)[:5]
		sa = app
		ports = []api.WorkloadEndpointPort{metrics}
	} else {
		k := i - ds
		others := c.namespaces - len(bigSystemNS)
		nsi, j := len(bigSystemNS)+k%others, k/others
		ns, node = c.nsName(nsi), (k*7919+13)%c.nodes
		dep := j / 8
		app = bigApps[dep%len(bigApps)]
		if dep >= len(bigApps) {
			app += strconv.Itoa(dep / len(bigApps))
		}
		if nsi%10 == 0 && dep == 0 {
			app = "db"
			pod = fmt.Sprintf("db-%d", j)
			labels["statefulset.kubernetes.io/pod-name"] = pod
			labels["controller-revision-hash"] = "db-" + bigHash(ns, "db")[:10]
		} else {
			hash := bigHash(ns, app)
			if (nsi+dep)%10 == 0 && j%2 == 1 {
				hash = bigHash(ns, app, "next")
			}
			labels["pod-template-hash"] = hash
			pod = app + "-" + hash + "-" + bigHash(i)[:5]
		}
		labels["app"] = app
		labels["app.kubernetes.io/name"] = app
		labels["app.kubernetes.io/instance"] = ns + "-" + app
		sa = "default"
		if dep%3 == 0 {
			sa = app
		}
		ports = []api.WorkloadEndpointPort{http}
		if dep%2 == 0 {
			ports = append(ports, metrics)
		}
	}
	nodeName := "node-" + strconv.Itoa(node)
	cid := bigHash(i, "c1") + bigHash(i, "c2") + bigHash(i, "c3") + bigHash(i, "c4") + bigHash(i, "c5") + bigHash(i, "c6") + "abcd"
	ip := netip.AddrFrom4([4]byte{10, byte(128 + i>>16), byte(i >> 8), byte(i)})
	w := &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(nodeName, "k8s", ns, pod, "", "eth0"), ResourceVersion: "123456"},
		Spec: api.WorkloadEndpointSpec{
			Node: nodeName, Orchestrator: "k8s", Namespace: ns, Pod: pod, ContainerID: cid, Endpoint: "eth0",
			InterfaceName: fmt.Sprintf("cali%011x", i), ContainerInterface: "eth0",
			IPNetworks: []string{netip.PrefixFrom(ip, 32).String()}, MAC: fmt.Sprintf("ee:ee:%02x:%02x:%02x:%02x", byte(i>>24), byte(i>>16), byte(i>>8), byte(i)),
			Handle: "k8s-pod-network." + cid, ServiceAccountName: sa, Ports: ports,
		},
	}
	w.Metadata.Labels, w.Spec.Profiles = api.PodIdentity(ns, sa, labels)
	return w
}

// serviceAccounts are the service accounts pods of namespace i use.
func (c bigCluster) serviceAccounts(i int) []string {
	if i < len(bigSystemNS) {
		return []string{"default", bigDS[i]}
	}
	return []string{"default", "api", "frontend", "search", "api1", "frontend1"}
}

// profiles are the namespace and service account profiles.
func (c bigCluster) profiles() []api.Resource {
	var out []api.Resource
	for i := range c.namespaces {
		ns := c.nsName(i)
		out = append(out, &api.Profile{
			TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
			Metadata: api.ObjectMeta{Name: api.NamespaceProfilePrefix + ns},
			Spec: api.ProfileSpec{
				LabelsToApply: map[string]string{"pcns.projectcalico.org/name": ns, "pcns.kubernetes.io/metadata.name": ns,
					"pcns.team": fmt.Sprintf("t%02d", i%40), "pcns.env": []string{"prod", "staging", "dev"}[i%3]},
				Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}},
			},
		})
		for _, sa := range c.serviceAccounts(i) {
			out = append(out, &api.Profile{
				TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
				Metadata: api.ObjectMeta{Name: api.ServiceAccountProfilePrefix + ns + "." + sa},
				Spec:     api.ProfileSpec{LabelsToApply: map[string]string{"pcsa.projectcalico.org/name": sa}},
			})
		}
	}
	return out
}

// policy returns policy i: every fifth a GlobalNetworkPolicy (the first
// two cluster-wide: DNS egress, and the monitoring namespace's scrapes
// of every pod's named port "metrics"), the others NetworkPolicies as
// the controllers convert Kubernetes' (an app's ingress from another
// app of its namespace on 8080 and "http", and from monitoring on
// 9090; every tenth from the pods of a team's namespaces).
func (c bigCluster) policy(i int) string {
	const k8s = "projectcalico.org/orchestrator == 'k8s'"
	app := func(n int) string { return bigApps[n%len(bigApps)] }
	switch {
	case i == 0:
		return fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"allow-dns"},
"spec":{"order":10,"selector":"%s","types":["Egress"],"egress":[{"action":"Allow","protocol":"UDP",
"destination":{"namespaceSelector":"projectcalico.org/name == 'kube-system'","selector":"k8s-app == 'kube-dns'","ports":[53]}},{"action":"Pass"}]}}`, k8s)
	case i == 5:
		return `{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"allow-scrapes"},
"spec":{"order":20,"selector":"all()","types":["Ingress"],"ingress":[{"action":"Allow","protocol":"TCP",
"source":{"namespaceSelector":"projectcalico.org/name == 'monitoring'"},"destination":{"ports":["metrics"]}},{"action":"Pass"}]}}`
	case i%5 == 0:
		return fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"gnp-%d"},
"spec":{"order":%d,"selector":"app == '%s'","types":["Ingress"],"ingress":[{"action":"Allow","protocol":"TCP",
"source":{"selector":"app == '%s'","namespaceSelector":"team == 't%02d'"},"destination":{"ports":[8080,"http"]}}]}}`, i, 100+i, app(i/5), app(i/5+3), i%40)
	}
	ns := c.nsName(len(bigSystemNS) + (i*7)%(c.namespaces-len(bigSystemNS)))
	src := fmt.Sprintf(`{"selector":"%s && app == '%s'"}`, k8s, app(i+1))
	if i%10 == 1 {
		src = fmt.Sprintf(`{"selector":"%s","namespaceSelector":"team == 't%02d'"}`, k8s, i%40)
	}
	return fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"NetworkPolicy","metadata":{"name":"knp.default.np-%d","namespace":"%s"},
"spec":{"order":1000,"selector":"%s && app == '%s'","types":["Ingress"],"ingress":[
{"action":"Allow","protocol":"TCP","source":%s,"destination":{"ports":[8080,"http"]}},
{"action":"Allow","protocol":"TCP","source":{"selector":"%s","namespaceSelector":"kubernetes.io/metadata.name == 'monitoring'"},"destination":{"ports":[9090]}}]}}`,
		i, ns, k8s, app(i), src, k8s)
}

// snapshot returns a snapshot of every kind felix takes, decoded as the
// feed decodes it; withEPs false leaves the WorkloadEndpoints out (an
// empty list: every endpoint goes).
func (c bigCluster) snapshot(tb testing.TB, withEPs bool) map[api.Kind][]api.Resource {
	rs := map[api.Kind][]api.Resource{}
	for _, k := range SyncKinds {
		rs[k] = nil
	}
	add := func(r api.Resource) { rs[r.GetKind()] = append(rs[r.GetKind()], decodeAsFeed(tb, r)) }
	add(&api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: "pods"}, Spec: api.IPPoolSpec{CIDR: "10.128.0.0/9", IPIPMode: "Never", VXLANMode: "Never", NATOutgoing: true, BlockSize: 26}})
	for n := range c.nodes {
		add(&api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
			Metadata: api.ObjectMeta{Name: "node-" + strconv.Itoa(n), Labels: map[string]string{"kubernetes.io/hostname": "node-" + strconv.Itoa(n),
				"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+n%3),
				"node.kubernetes.io/instance-type": "m5.2xlarge"}},
			Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: fmt.Sprintf("192.168.%d.%d/16", n>>8, n&255)}}})
	}
	for _, r := range c.profiles() {
		add(r)
	}
	for i := range c.policies {
		d, err := api.Decode([]byte(c.policy(i)))
		if err != nil {
			tb.Fatalf("policy %d: %v", i, err)
		}
		add(d.Resources[0])
	}
	for i := range 20 {
		add(&api.GlobalNetworkSet{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkSet},
			Metadata: api.ObjectMeta{Name: "external-" + strconv.Itoa(i), Labels: map[string]string{"role": "external", "zone": strconv.Itoa(i % 4)}},
			Spec:     api.NetworkSetSpec{Nets: []string{fmt.Sprintf("203.0.%d.0/24", i), fmt.Sprintf("198.51.%d.0/24", i)}}})
	}
	if withEPs {
		for i := range c.eps {
			add(c.endpoint(i))
		}
	}
	return rs
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// scaleNode is felix's state and policy (a real dataplane in a fresh
// netns) on node-0, taking snapshots as felix.ReplaceResources does.
type scaleNode struct {
	ns *nstest.NS
	l  *loop
	m  *policy.Manager
	// flows is the flow records' model (nil when flows are off).
	flows *flowsState
}

// scaleFlowGroup is the nflog group of flow marks when flows are on.
const scaleFlowGroup = 7

func newScaleNode(b testing.TB, flows bool) *scaleNode {
	n := nstest.New(b)
	f, err := os.Open(n.Path())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	cfg := &Config{NodeName: "node-0"}
	if flows {
		cfg.PolicyLog.FlowGroup = scaleFlowGroup
		cfg.Flows.Sinks = []func(flowrec.Batch){func(flowrec.Batch) {}}
	}
	m, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: int(f.Fd())}, Log: cfg.PolicyLog})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	// The loop's netlink handle in the netns: applyPolicy looks up which
	// interface holds the node's address (syncHostDevices).
	h, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	return &scaleNode{ns: n, l: &loop{cfg: cfg, st: newState(), policy: m, policyNames: names{}, h: h,
		log: logrus.WithField("component", "felix-scale")}, m: m, flows: newFlowsState(cfg)}
}

// take hands a snapshot over and applies the policy: how long each took,
// and the process's CPU time (user and system, the collector's
// included) for the first.
func (n *scaleNode) take(b testing.TB, snap feedSnap) (calc, apply, cpu time.Duration) {
	t0, c0 := time.Now(), cpuTime()
	// What felix.ReplaceEncoded does on the loop.
	n.l.replace(snap.rs, snap.enc, n.flows)
	t1, c1 := time.Now(), cpuTime()
	if err := n.l.applyPolicy(context.Background(), false); err != nil {
		b.Fatal(err)
	}
	return t1.Sub(t0), time.Since(t1), c1 - c0
}

// feedSnapshot is a snapshot of c as the feed hands it to felix (see
// encoded); with FELIX_SCALE_DECODED=1 all decoded, as before felix took
// endpoints undecoded.
func (c bigCluster) feedSnapshot(tb testing.TB, withEPs bool) feedSnap {
	if os.Getenv("FELIX_SCALE_DECODED") == "1" || !withEPs {
		return feedSnap{rs: c.snapshot(tb, withEPs)}
	}
	rs := c.snapshot(tb, false)
	enc := make([]feed.Encoded, 0, c.eps)
	for i := range c.eps {
		enc = append(enc, encodeAsStored(tb, c.endpoint(i)))
	}
	return feedSnap{rs, enc}
}

// encodeAsStored is r as the feed hands it over undecoded
// (feed.Undecoded): its stored value and its name, each its own
// allocation as a listed item's value and key are.
func encodeAsStored(tb testing.TB, r api.Resource) feed.Encoded {
	v, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	return feed.NewEncoded(r.GetKind(), api.StoreName(r), v, 1)
}

// feedSnap is a snapshot as felix takes it: decoded resources by kind,
// and undecoded ones.
type feedSnap struct {
	rs  map[api.Kind][]api.Resource
	enc []feed.Encoded
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRemoteEndpoints measures what felix keeps per endpoint of a
// big cluster, and how long a snapshot of it takes: one felix on node-0
// takes a snapshot of bigCluster without endpoints, another the whole
// snapshot (timed: state and policy, then the policy's Apply), then the
// same snapshot again (what a consumer that fell behind gets), then one
// without endpoints. The heap is measured after a full collection with
// the snapshots themselves dropped, so what is counted is what felix
// retains; per endpoint is the difference between the two felixes,
// divided by the endpoints.
//
// Run: go test -run XXX -bench RemoteEndpoints -benchtime 1x ./felix
// (FELIX_SCALE_EPS, _NODES, _NAMESPACES, _POLICIES change the size;
// defaults 150,000, 5,000, 2,000, 500; FELIX_SCALE_FLOWS=1 turns flow
// records on, whose model holds every endpoint again;
// FELIX_SCALE_HEAPPROFILE=<file>
// writes the heap with the endpoints for go tool pprof, and <file>.base
// the heap before the felix with them started: pprof -diff_base
// <file>.base <file> shows what that felix holds).
func BenchmarkRemoteEndpoints(b *testing.B) {
	c := bigCluster{eps: envInt("FELIX_SCALE_EPS", 150000), nodes: envInt("FELIX_SCALE_NODES", 5000),
		namespaces: envInt("FELIX_SCALE_NAMESPACES", 2000), policies: envInt("FELIX_SCALE_POLICIES", 500)}
	flows := os.Getenv("FELIX_SCALE_FLOWS") == "1"
	if os.Getenv("FELIX_SCALE_HEAPPROFILE") != "" {
		// Sample finely: the default (one sample per 512 KiB) cannot
		// tell apart retainers of a few bytes per endpoint.
		defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
		runtime.MemProfileRate = 4096
	}
	for range b.N {
		h0 := heapInUse()
		without := newScaleNode(b, flows)
		without.take(b, c.feedSnapshot(b, false))
		hWithout := heapInUse()
		if path := os.Getenv("FELIX_SCALE_HEAPPROFILE"); path != "" {
			writeHeapProfile(b, path+".base")
		}
		with := newScaleNode(b, flows)
		first, firstApply, firstCPU := with.take(b, c.feedSnapshot(b, true))
		hWith := heapInUse()
		var inuse runtime.MemStats
		runtime.ReadMemStats(&inuse)
		local := len(with.l.st.weps)
		if path := os.Getenv("FELIX_SCALE_HEAPPROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		again, againApply, againCPU := with.take(b, c.feedSnapshot(b, true))
		hAgain := heapInUse()
		with.take(b, c.feedSnapshot(b, false))
		hGone := heapInUse()
		fixed, full := hWithout-h0, hWith-hWithout
		perEP := (float64(full) - float64(fixed)) / float64(c.eps)
		mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
		ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
		b.Logf("flows on: %v", flows)
		b.Logf("%d endpoints (%d local), %d nodes, %d namespaces, %d policies: first snapshot %v (CPU %v) + apply %v; same snapshot again %v (CPU %v) + apply %v",
			c.eps, local, c.nodes, c.namespaces, c.policies, ms(first), ms(firstCPU), ms(firstApply), ms(again), ms(againCPU), ms(againApply))
		b.Logf("heap retained: %.1f MiB with the endpoints (%.1f MiB after the same snapshot again), %.1f MiB without: %.0f bytes per endpoint; %.1f MiB once the endpoints went",
			mib(full), mib(hAgain-hWithout), mib(fixed), perEP, mib(hGone-hWithout))
		b.Logf("heap in use after the first snapshot (pages holding objects): %.1f MiB for %.1f MiB live",
			mib(inuse.HeapInuse), mib(inuse.HeapAlloc))
		b.ReportMetric(perEP, "B/endpoint")
		b.ReportMetric(mib(inuse.HeapInuse), "MiB-inuse")
		b.ReportMetric(float64(first.Milliseconds()), "snapshot-ms")
		b.ReportMetric(float64(again.Milliseconds()), "resnapshot-ms")
		runtime.KeepAlive(without)
		runtime.KeepAlive(with)
	}
}

// writeHeapProfile writes the live heap as of the last collection.
func writeHeapProfile(tb testing.TB, path string) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
