package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/routed/controllers"
)

// The simulated cluster: what a Kubernetes cluster of this size holds in
// routed's datastore, made by the same code routed uses to write it
// (controllers' conversions, api.PodIdentity, datastore.Encode, the IPAM
// client's records).

// appsPerNamespace is how many Deployments each namespace runs; a
// namespace's pods are spread over them.
const appsPerNamespace = 5

// teams is how many values the namespaces' team label takes: a namespace
// selector on a team picks namespaces/teams of them.
const teams = 50

// trackedApp is the app label of the tracked pods: no other policy's
// rule selector names it, so their addresses are in one set of a real
// node, the tracking policy's.
const trackedApp = "scale-tracked"

var tierOf = [3]string{"frontend", "backend", "db"}

// simPod is one simulated pod: enough to write its endpoint again and to
// delete it.
type simPod struct {
	node    string
	ns, app int
	name    string
	cid     string
	addr    netip.Addr
	tracked bool
}

func (p *simPod) handle() string { return ipam.PodHandle(ipam.DefaultNetwork, p.cid) }

func (p *simPod) namespace() string { return nsName(p.ns) }

func (p *simPod) wepName() string {
	return api.WorkloadEndpointName(p.node, "k8s", p.namespace(), p.name, "", "eth0")
}

func nsName(i int) string { return fmt.Sprintf("ns-%04d", i) }

func simNodeName(i int) string { return fmt.Sprintf("sim-%05d", i) }

// newPod makes pod number g (cluster-wide) for node: its namespace and
// Deployment follow from g, so every namespace has pods on many nodes.
func newPod(rng *rand.Rand, g, namespaces int, node string, track float64) *simPod {
	ns := g % namespaces
	app := (g / namespaces) % appsPerNamespace
	var id [32]byte
	for i := 0; i < 32; i += 8 {
		binary.LittleEndian.PutUint64(id[i:], rng.Uint64())
	}
	return &simPod{
		node: node, ns: ns, app: app,
		name:    fmt.Sprintf("app-%d-%08x-%05x", app, uint32(ns*appsPerNamespace+app)*2654435761, g),
		cid:     fmt.Sprintf("%x", id),
		tracked: rng.Float64() < track,
	}
}

// podLabels are the pod's own labels (as its Deployment sets them).
func (p *simPod) podLabels() map[string]string {
	app := fmt.Sprintf("app-%d", p.app)
	l := map[string]string{"tier": tierOf[p.app%3], "pod-template-hash": fmt.Sprintf("%08x", uint32(p.ns*appsPerNamespace+p.app)*2654435761)}
	if p.tracked {
		app = trackedApp
		l["scale-track"] = "yes"
	}
	l["app"] = app
	return l
}

// ports are the pod's named container ports, by tier.
func (p *simPod) ports() []api.WorkloadEndpointPort {
	tcp := api.ProtocolFromName(api.ProtocolTCP)
	switch p.app % 3 {
	case 0:
		return []api.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}, {Name: "metrics", Protocol: tcp, Port: 9090}}
	case 1:
		return []api.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}, {Name: "grpc", Protocol: tcp, Port: 9000}, {Name: "metrics", Protocol: tcp, Port: 9090}}
	}
	return []api.WorkloadEndpointPort{{Name: "db", Protocol: tcp, Port: 5432}, {Name: "metrics", Protocol: tcp, Port: 9090}}
}

// wep is the pod's WorkloadEndpoint as routed-cni writes it for a
// Kubernetes pod (Calico's identity labels and profiles).
func (p *simPod) wep() *api.WorkloadEndpoint {
	ns := p.namespace()
	labels, profiles := api.PodIdentity(ns, "default", p.podLabels())
	mac := fmt.Sprintf("ee:%s:%s:%s:%s:%s", p.cid[0:2], p.cid[2:4], p.cid[4:6], p.cid[6:8], p.cid[8:10])
	return &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: p.wepName(), Labels: labels},
		Spec: api.WorkloadEndpointSpec{
			Node: p.node, Orchestrator: "k8s", Namespace: ns, Pod: p.name,
			ContainerID: p.cid, Endpoint: "eth0", InterfaceName: kernel.HostDeviceName(ns, p.name, ""),
			ContainerInterface: "eth0", IPNetworks: []string{netip.PrefixFrom(p.addr, 32).String()},
			MAC: mac, Handle: p.handle(), ServiceAccountName: "default", Profiles: profiles, Ports: p.ports(),
		},
	}
}

// namespaceObjects are the profiles routed-controllers keeps for
// namespace i and its default service account.
func namespaceObjects(i int) []api.Resource {
	env := [3]string{"prod", "staging", "dev"}[i%3]
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: map[string]string{
		"kubernetes.io/metadata.name": nsName(i), "team": fmt.Sprintf("team-%d", i%teams), "env": env}}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: nsName(i)}}
	return []api.Resource{controllers.NamespaceProfile(ns), controllers.ServiceAccountProfile(sa)}
}

// simNode is simulated node i's Node record, as routed registers it
// (with the labels a cloud's kubelet sets). Its address is in the lab's
// router namespace's range but no one listens there: no session is
// configured with it (the BGP peers select the real nodes only).
func simNode(i int, addr netip.Prefix) *api.Node {
	name := simNodeName(i)
	return &api.Node{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+i%3), "node.kubernetes.io/instance-type": "m5.2xlarge"}},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: addr.String()}},
	}
}

// peer is one Kubernetes NetworkPolicy peer.
func peer(ns map[string]string, pods map[string]string) networkingv1.NetworkPolicyPeer {
	var p networkingv1.NetworkPolicyPeer
	if ns != nil {
		p.NamespaceSelector = &metav1.LabelSelector{MatchLabels: ns}
	}
	if pods != nil {
		p.PodSelector = &metav1.LabelSelector{MatchLabels: pods}
	}
	return p
}

func namedPort(name string) networkingv1.NetworkPolicyPort {
	tcp := corev1.ProtocolTCP
	p := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &p}
}

func numPort(n int) networkingv1.NetworkPolicyPort {
	tcp := corev1.ProtocolTCP
	p := intstr.FromInt32(int32(n))
	return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &p}
}

// simNetworkPolicy is Kubernetes NetworkPolicy number i as routed-controllers
// converts it: pods of one Deployment of a namespace, ingress from another
// Deployment (named port) and from a team's frontends, egress for a third
// of them to the prod namespaces' databases and an external net.
func simNetworkPolicy(i, namespaces int) *api.NetworkPolicy {
	app := func(k int) map[string]string {
		return map[string]string{"app": fmt.Sprintf("app-%d", k%appsPerNamespace)}
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("np-%d", i), Namespace: nsName(i % namespaces)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: app(i)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{peer(nil, app(i+1))}, Ports: []networkingv1.NetworkPolicyPort{namedPort("http")}},
				{From: []networkingv1.NetworkPolicyPeer{peer(map[string]string{"team": fmt.Sprintf("team-%d", i%teams)}, map[string]string{"tier": "frontend"})},
					Ports: []networkingv1.NetworkPolicyPort{numPort(8080 + i%3)}},
			},
		},
	}
	if i%3 == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{peer(map[string]string{"env": "prod"}, map[string]string{"tier": "db"})}, Ports: []networkingv1.NetworkPolicyPort{namedPort("db")}},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("198.18.%d.0/24", i%256)}}}},
		}
	}
	return controllers.ConvertNetworkPolicy(np).Policy
}

// localPolicy is Kubernetes NetworkPolicy number j of the real pods'
// namespace (default): every pod there, ingress from one Deployment of a
// team's namespaces on its named port. These are the policies that make
// a real node hold sets of remote pods, as a node of a real cluster does.
func localPolicy(j int) *api.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("local-%d", j), Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{peer(map[string]string{"team": fmt.Sprintf("team-%d", j%teams)},
					map[string]string{"app": fmt.Sprintf("app-%d", j%appsPerNamespace)})},
				Ports: []networkingv1.NetworkPolicyPort{namedPort("http"), numPort(9090)},
			}},
		},
	}
	return controllers.ConvertNetworkPolicy(np).Policy
}

// simGlobalPolicy is GlobalNetworkPolicy number i: one tier's pods of a
// team's namespaces; ingress from another Deployment of the prod
// namespaces on a named port, egress to a class of network sets, and
// every fourth denies a tier first. It never selects the real pods (they
// have no app label).
func simGlobalPolicy(i int) *api.GlobalNetworkPolicy {
	tcp := api.ProtocolFromName(api.ProtocolTCP)
	order := float64(100 + i%400)
	p := &api.GlobalNetworkPolicy{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
		Metadata: api.ObjectMeta{Name: fmt.Sprintf("gnp-%d", i)},
	}
	p.Spec.Order = &order
	p.Spec.Selector = fmt.Sprintf("has(app) && tier == '%s' && app == 'app-%d'", tierOf[i%3], i%appsPerNamespace)
	p.Spec.NamespaceSelector = fmt.Sprintf("team == 'team-%d'", i%teams)
	p.Spec.Types = []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
	p.Spec.Ingress = []api.Rule{{Action: api.ActionAllow, Protocol: &tcp,
		Source:      api.EntityRule{Selector: fmt.Sprintf("app == 'app-%d'", (i+1)%appsPerNamespace), NamespaceSelector: "env == 'prod'"},
		Destination: api.EntityRule{Ports: []api.Port{api.NamedPort("metrics"), api.SinglePort(uint16(9000 + i%100))}}}}
	if i%4 == 0 {
		p.Spec.Ingress = append([]api.Rule{{Action: api.ActionDeny, Source: api.EntityRule{Selector: "tier == 'db'"}}}, p.Spec.Ingress...)
	}
	p.Spec.Egress = []api.Rule{
		{Action: api.ActionAllow, Protocol: &tcp, Destination: api.EntityRule{Selector: fmt.Sprintf("netset-role == 'external-%d'", i%20)}},
		{Action: api.ActionAllow, Destination: api.EntityRule{Selector: "tier == 'backend'", NamespaceSelector: fmt.Sprintf("team == 'team-%d'", (i+1)%teams)}},
	}
	return p
}

// trackPolicyName is the GlobalNetworkPolicy whose source set on every
// real node holds the tracked pods.
const trackPolicyName = "scale-big-track"

// trackPolicy selects the real pods (namespace default) and allows in
// traffic from the tracked pods and from each other (the harness's pings).
func trackPolicy() *api.GlobalNetworkPolicy {
	p := &api.GlobalNetworkPolicy{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
		Metadata: api.ObjectMeta{Name: trackPolicyName},
	}
	p.Spec.Selector = api.LabelNamespace + " == 'default'"
	p.Spec.Types = []api.PolicyType{api.PolicyTypeIngress}
	p.Spec.Ingress = []api.Rule{
		{Action: api.ActionAllow, Source: api.EntityRule{Selector: "scale-track == 'yes'"}},
		{Action: api.ActionAllow, Source: api.EntityRule{Selector: api.LabelNamespace + " == 'default'"}},
	}
	return p
}

// simNetworkSet is network set number i: most in a namespace, one in five
// global; labelled by class, with two nets of the benchmark range
// (198.18.0.0/15: no one's addresses).
func simNetworkSet(i, namespaces int) api.Resource {
	labels := map[string]string{"netset-role": fmt.Sprintf("external-%d", i%20)}
	nets := []string{fmt.Sprintf("198.18.%d.0/24", i%256), fmt.Sprintf("198.19.%d.%d/28", i%256, 16*(i%16))}
	if i%5 == 0 {
		return &api.GlobalNetworkSet{
			TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkSet},
			Metadata: api.ObjectMeta{Name: fmt.Sprintf("gns-%d", i), Labels: labels},
			Spec:     api.NetworkSetSpec{Nets: nets},
		}
	}
	return &api.NetworkSet{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNetworkSet},
		Metadata: api.ObjectMeta{Name: fmt.Sprintf("ns-set-%d", i), Namespace: nsName(i % namespaces), Labels: labels},
		Spec:     api.NetworkSetSpec{Nets: nets},
	}
}
