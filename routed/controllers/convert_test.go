package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/routed-net/routed/pkg/api"
)

const orch = "projectcalico.org/orchestrator == 'k8s'"

func np(name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name}, Spec: spec}
}

// rulesJSON prints rules compactly for comparison with what Kubernetes'
// semantics require, written out by hand in each case.
func rulesJSON(t *testing.T, rules []api.Rule) string {
	t.Helper()
	var out []string
	for _, r := range rules {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return strings.Join(out, "\n")
}

func proto(p corev1.Protocol) *corev1.Protocol { return &p }
func port(n int) *intstr.IntOrString           { v := intstr.FromInt32(int32(n)); return &v }
func named(s string) *intstr.IntOrString       { v := intstr.FromString(s); return &v }
func i32(n int32) *int32                       { return &n }

func TestConvertNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name            string
		spec            networkingv1.NetworkPolicySpec
		selector        string
		types           string
		ingress, egress string
	}{{
		name:     "deny-all ingress: podSelector {} and no rules",
		spec:     networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Ingress"}},
		selector: orch, types: "Ingress",
	}, {
		name:     "no policyTypes: Ingress only, egress rules not enforced",
		spec:     networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}},
		selector: orch, types: "Ingress",
	}, {
		name: "both types, empty rules allow everything; pod selector labels and expressions",
		spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"b": "2", "a": "1"},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "x", Operator: metav1.LabelSelectorOpIn, Values: []string{"p", "q"}},
					{Key: "y", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"r"}},
					{Key: "z", Operator: metav1.LabelSelectorOpExists},
					{Key: "w", Operator: metav1.LabelSelectorOpDoesNotExist}}},
			PolicyTypes: []networkingv1.PolicyType{"Ingress", "Egress"},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}}},
		selector: orch + " && a == '1' && b == '2' && x in { 'p', 'q' } && y not in { 'r' } && has(z) && ! has(w)",
		types:    "Ingress,Egress",
		ingress:  `{"action":"Allow"}`,
		egress:   `{"action":"Allow"}`,
	}, {
		name: "peers: pod selector alone (own namespace), namespace selector alone, both, {} namespaces",
		spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}},
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "t"}}},
			{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}}},
			{PodSelector: &metav1.LabelSelector{}},
		}}}},
		selector: orch, types: "Ingress",
		ingress: `{"action":"Allow","source":{"selector":"` + orch + ` \u0026\u0026 app == 'a'"}}
{"action":"Allow","source":{"selector":"` + orch + `","namespaceSelector":"team == 't'"}}
{"action":"Allow","source":{"selector":"` + orch + ` \u0026\u0026 app == 'b'","namespaceSelector":"all()"}}
{"action":"Allow","source":{"selector":"` + orch + `"}}`,
	}, {
		name: "ipBlock with except, host bits cleared, IPv6 too; egress",
		spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Egress"}, Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.2.3/16", Except: []string{"10.1.5.0/24", "10.1.6.7/32"}}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::1/64"}},
		}}}},
		selector: orch, types: "Egress",
		egress: `{"action":"Allow","destination":{"nets":["10.1.0.0/16"],"notNets":["10.1.5.0/24","10.1.6.7/32"]}}
{"action":"Allow","destination":{"nets":["fd00::/64"]}}`,
	}, {
		name: "ports: default TCP, adjacent numbers merged, endPort range, named port, a protocol with every port",
		spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
			{Port: port(81)},
			{Protocol: proto("TCP"), Port: port(80)},
			{Protocol: proto("TCP"), Port: port(8000), EndPort: i32(8080)},
			{Protocol: proto("TCP"), Port: named("serve-80")},
			{Protocol: proto("UDP"), Port: port(53)},
			{Protocol: proto("SCTP")},
		}}}},
		selector: orch, types: "Ingress",
		ingress: `{"action":"Allow","protocol":"SCTP"}
{"action":"Allow","protocol":"TCP","destination":{"ports":["80:81","8000:8080","serve-80"]}}
{"action":"Allow","protocol":"UDP","destination":{"ports":[53]}}`,
	}, {
		name: "an empty port entry is every TCP port (protocol defaults to TCP); each peer and protocol its own rule",
		spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: proto("UDP"), Port: port(5)}, {}}},
			{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: port(80)}, {Protocol: proto("UDP"), Port: named("dns")}}},
		}},
		selector: orch, types: "Ingress",
		ingress: `{"action":"Allow","protocol":"TCP"}
{"action":"Allow","protocol":"UDP","destination":{"ports":[5]}}
{"action":"Allow","protocol":"TCP","source":{"selector":"` + orch + ` \u0026\u0026 a == 'b'"},"destination":{"ports":[80]}}
{"action":"Allow","protocol":"TCP","source":{"nets":["192.0.2.0/24"]},"destination":{"ports":[80]}}
{"action":"Allow","protocol":"UDP","source":{"selector":"` + orch + ` \u0026\u0026 a == 'b'"},"destination":{"ports":["dns"]}}
{"action":"Allow","protocol":"UDP","source":{"nets":["192.0.2.0/24"]},"destination":{"ports":["dns"]}}`,
	}, {
		name: "egress named ports without a peer or to an ipBlock: the names are looked up on pods of every namespace, the numbers go anywhere",
		spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Egress"}, Egress: []networkingv1.NetworkPolicyEgressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Port: named("serve-80-tcp")}}},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: port(443)}, {Port: named("web")}}},
			{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: named("web")}}},
		}},
		selector: orch, types: "Egress",
		egress: `{"action":"Allow","protocol":"TCP","destination":{"selector":"` + orch + `","namespaceSelector":"all()","ports":["serve-80-tcp"]}}
{"action":"Allow","protocol":"TCP","destination":{"nets":["10.0.0.0/8"],"ports":[443]}}
{"action":"Allow","protocol":"TCP","destination":{"nets":["10.0.0.0/8"],"selector":"` + orch + `","namespaceSelector":"all()","ports":["web"]}}
{"action":"Allow","protocol":"TCP","destination":{"selector":"` + orch + ` \u0026\u0026 a == 'b'","ports":["web"]}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := ConvertNetworkPolicy(np("p1", tc.spec))
			if len(c.Problems) > 0 {
				t.Fatalf("problems: %v", c.Problems)
			}
			p := c.Policy
			if p.Metadata.Name != "knp.default.p1" || p.Metadata.Namespace != "ns1" || p.Spec.Tier != "default" || *p.Spec.Order != 1000 {
				t.Errorf("name %s/%s tier %s order %v, want ns1/knp.default.p1 in default at 1000", p.Metadata.Namespace, p.Metadata.Name, p.Spec.Tier, *p.Spec.Order)
			}
			if !IsOwned(p) || p.Metadata.Annotations[SourceAnnotation] != "ns1/p1" {
				t.Errorf("annotations %v: want the owner mark and source ns1/p1", p.Metadata.Annotations)
			}
			if p.Spec.Selector != tc.selector {
				t.Errorf("selector\n got %s\nwant %s", p.Spec.Selector, tc.selector)
			}
			var types []string
			for _, ty := range p.Spec.Types {
				types = append(types, string(ty))
			}
			if got := strings.Join(types, ","); got != tc.types {
				t.Errorf("types %s, want %s", got, tc.types)
			}
			if got := rulesJSON(t, p.Spec.Ingress); got != tc.ingress {
				t.Errorf("ingress\n got %s\nwant %s", got, tc.ingress)
			}
			if got := rulesJSON(t, p.Spec.Egress); got != tc.egress {
				t.Errorf("egress\n got %s\nwant %s", got, tc.egress)
			}
			if err := validate(p); err != nil {
				t.Errorf("the datastore would refuse it: %v", err)
			}
		})
	}
}

func TestConvertSplitsLongPortLists(t *testing.T) {
	var ports []networkingv1.NetworkPolicyPort
	for i := 0; i < 120; i++ {
		ports = append(ports, networkingv1.NetworkPolicyPort{Port: port(1000 + 2*i)}) // none adjacent
	}
	c := ConvertNetworkPolicy(np("many", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ports}}}))
	if len(c.Problems) > 0 {
		t.Fatalf("problems: %v", c.Problems)
	}
	n := 0
	for _, r := range c.Policy.Spec.Ingress {
		if len(r.Destination.Ports) > portsPerRule {
			t.Errorf("a rule has %d ports", len(r.Destination.Ports))
		}
		n += len(r.Destination.Ports)
	}
	if n != 120 || len(c.Policy.Spec.Ingress) != 3 {
		t.Errorf("%d ports over %d rules, want 120 over 3", n, len(c.Policy.Spec.Ingress))
	}
}

// A rule routed cannot hold (an ipBlock with more excepts than a rule
// may list) is left out, never widened, and reported; the rest stays.
func TestConvertNotExpressibleIsStricter(t *testing.T) {
	var except []string
	for i := 0; i < 300; i++ {
		except = append(except, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	c := ConvertNetworkPolicy(np("wide", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: except}}}},
		{Ports: []networkingv1.NetworkPolicyPort{{Port: port(80)}}},
	}}))
	if len(c.Problems) != 1 || !strings.Contains(c.Problems[0], "spec.ingress[0]") || !strings.Contains(c.Problems[0], "notNets") {
		t.Fatalf("problems %q: want one naming spec.ingress[0] and notNets", c.Problems)
	}
	if got, want := rulesJSON(t, c.Policy.Spec.Ingress), `{"action":"Allow","protocol":"TCP","destination":{"ports":[80]}}`; got != want {
		t.Errorf("ingress\n got %s\nwant %s", got, want)
	}
	if err := validate(c.Policy); err != nil {
		t.Error(err)
	}
}

func TestConvertLongName(t *testing.T) {
	long := strings.Repeat("a", 250)
	c := ConvertNetworkPolicy(np(long, networkingv1.NetworkPolicySpec{}))
	if len(c.Problems) > 0 || validate(c.Policy) != nil {
		t.Fatalf("problems %v, validation %v", c.Problems, validate(c.Policy))
	}
	if n := c.Policy.Metadata.Name; len(n) > 253 || !strings.HasPrefix(n, "knp.default.aaa") || n != PolicyName(long) {
		t.Errorf("name %s", n)
	}
	if c.Policy.Metadata.Annotations[SourceAnnotation] != "ns1/"+long {
		t.Errorf("source annotation %q", c.Policy.Metadata.Annotations[SourceAnnotation])
	}
	if PolicyName(long) == PolicyName(long[:249]+"b") {
		t.Error("two long names share a policy name")
	}
}

func TestProfiles(t *testing.T) {
	ns := NamespaceProfile(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"kubernetes.io/metadata.name": "team-a", "env": "prod"}}})
	if ns.Metadata.Name != "kns.team-a" || !IsOwned(ns) {
		t.Errorf("name %s owned %v", ns.Metadata.Name, IsOwned(ns))
	}
	want := map[string]string{"pcns.kubernetes.io/metadata.name": "team-a", "pcns.env": "prod", "pcns.projectcalico.org/name": "team-a"}
	if fmt.Sprint(ns.Spec.LabelsToApply) != fmt.Sprint(want) {
		t.Errorf("labels %v, want %v", ns.Spec.LabelsToApply, want)
	}
	if rulesJSON(t, ns.Spec.Ingress) != `{"action":"Allow"}` || rulesJSON(t, ns.Spec.Egress) != `{"action":"Allow"}` {
		t.Errorf("namespace profile rules %v %v, want allow-all both ways", ns.Spec.Ingress, ns.Spec.Egress)
	}
	sa := ServiceAccountProfile(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "builder", Labels: map[string]string{"role": "ci"}}})
	if sa.Metadata.Name != "ksa.team-a.builder" || len(sa.Spec.Ingress)+len(sa.Spec.Egress) != 0 {
		t.Errorf("sa profile %s with rules %v %v", sa.Metadata.Name, sa.Spec.Ingress, sa.Spec.Egress)
	}
	if fmt.Sprint(sa.Spec.LabelsToApply) != fmt.Sprint(map[string]string{"pcsa.role": "ci", "pcsa.projectcalico.org/name": "builder"}) {
		t.Errorf("sa labels %v", sa.Spec.LabelsToApply)
	}
	for _, p := range []*api.Profile{ns, sa} {
		api.SetDefaults(p)
		if err := p.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestPodEndpoint(t *testing.T) {
	wep := &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: "n1-k8s-ns1-web-eth0", Labels: map[string]string{"app": "old"}},
		Spec: api.WorkloadEndpointSpec{Node: "n1", Orchestrator: "k8s", Namespace: "ns1", Pod: "web", ContainerID: "c1", InterfaceName: "cali1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{ServiceAccountName: "sa1", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080}, {ContainerPort: 9}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}}}
	out, changed := PodEndpoint(wep, pod)
	if !changed {
		t.Fatal("not changed")
	}
	if wep.Metadata.Labels["app"] != "old" {
		t.Error("the input endpoint was modified")
	}
	wantLabels := map[string]string{"app": "web", api.LabelNamespace: "ns1", api.LabelOrchestrator: "k8s", api.LabelServiceAccount: "sa1"}
	if fmt.Sprint(out.Metadata.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels %v, want %v", out.Metadata.Labels, wantLabels)
	}
	if fmt.Sprint(out.Spec.Profiles) != "[kns.ns1 ksa.ns1.sa1]" || out.Spec.ServiceAccountName != "sa1" {
		t.Errorf("profiles %v sa %s", out.Spec.Profiles, out.Spec.ServiceAccountName)
	}
	if b, _ := json.Marshal(out.Spec.Ports); string(b) != `[{"name":"http","protocol":"TCP","port":8080},{"name":"dns","protocol":"UDP","port":53}]` {
		t.Errorf("ports %s", b)
	}
	if _, again := PodEndpoint(out, pod); again {
		t.Error("a second pass changed it again")
	}
	pod.Labels["app"] = "web2"
	if o2, ch := PodEndpoint(out, pod); !ch || o2.Metadata.Labels["app"] != "web2" {
		t.Error("a label change was not carried")
	}
}
