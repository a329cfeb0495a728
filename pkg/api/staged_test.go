package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// Calico's three staged kinds as Calico's docs write them (the samples
// of its resource reference), with a Delete of each.
const stagedCalico = `apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata:
  name: internal-access.allow-tcp-6379
  namespace: production
spec:
  tier: internal-access
  selector: role == 'database'
  types: [Ingress, Egress]
  ingress:
  - action: Allow
    metadata: {annotations: {from: frontend, to: database}}
    protocol: TCP
    source: {selector: role == 'frontend'}
    destination: {ports: [6379]}
  egress:
  - action: Allow
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: internal-access.allow-tcp-6379}
spec:
  tier: internal-access
  selector: role == 'database'
  namespaceSelector: team == 'db'
  types: [Ingress, Egress]
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: role == 'frontend'}
    destination: {ports: [6379]}
  egress:
  - action: Allow
---
apiVersion: projectcalico.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: test-network-policy, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress, Egress]
  ingress:
  - from:
    - ipBlock: {cidr: 172.17.0.0/16, except: [172.17.1.0/24]}
    - namespaceSelector: {matchLabels: {project: myproject}}
    - podSelector: {matchLabels: {role: frontend}}
    ports:
    - {protocol: TCP, port: 6379}
  egress:
  - to:
    - ipBlock: {cidr: 10.0.0.0/24}
    ports:
    - {protocol: TCP, port: 5978, endPort: 5990}
    - {port: metrics}
---
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: allow-all, namespace: production}
spec: {stagedAction: Delete}
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: security.deny-blocked}
spec: {stagedAction: Delete, tier: security}
---
apiVersion: crd.projectcalico.org/v1
kind: StagedKubernetesNetworkPolicy
metadata: {name: old, namespace: shop}
spec: {stagedAction: Delete}
`

func decodeStaged(t *testing.T, in string) []api.Resource {
	t.Helper()
	d, err := api.Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		if err := r.Validate(); err != nil {
			t.Fatalf("%s %s: %v", r.GetKind(), api.StoreName(r), err)
		}
	}
	return d.Resources
}

// TestStagedCalicoForms: Calico's forms of the three kinds decode and
// validate, with Calico's defaults (stagedAction Set, a Set policy's
// tier and types, a Delete's tier only), and what routed prints reads
// back to the same objects and prints the same again (apply, then get,
// prints the document back).
func TestStagedCalicoForms(t *testing.T) {
	t.Parallel()
	rs := decodeStaged(t, stagedCalico)
	if len(rs) != 6 {
		t.Fatalf("decoded %d resources, want 6", len(rs))
	}
	snp := rs[0].(*api.StagedNetworkPolicy)
	if snp.Spec.StagedAction != api.StagedActionSet || snp.Spec.Tier != "internal-access" || len(snp.Spec.Ingress) != 1 || snp.Metadata.Namespace != "production" {
		t.Errorf("StagedNetworkPolicy: %+v", snp.Spec)
	}
	sgnp := rs[1].(*api.StagedGlobalNetworkPolicy)
	if sgnp.Spec.NamespaceSelector != "team == 'db'" || sgnp.Action() != api.StagedActionSet {
		t.Errorf("StagedGlobalNetworkPolicy: %+v", sgnp.Spec)
	}
	sknp := rs[2].(*api.StagedKubernetesNetworkPolicy)
	eg := sknp.Spec.Egress[0]
	if sknp.Spec.PodSelector.MatchLabels["role"] != "db" || len(sknp.Spec.Ingress[0].From) != 3 ||
		*eg.Ports[0].EndPort != 5990 || eg.Ports[0].Port.Num != 5978 || !eg.Ports[1].Port.IsName || eg.Ports[1].Port.Name != "metrics" ||
		sknp.Spec.Ingress[0].From[0].IPBlock.Except[0] != "172.17.1.0/24" {
		t.Errorf("StagedKubernetesNetworkPolicy: %+v", sknp.Spec)
	}
	del := rs[3].(*api.StagedNetworkPolicy)
	if del.Action() != api.StagedActionDelete || del.Spec.Tier != "default" || del.Spec.Types != nil {
		t.Errorf("Delete defaults: %+v", del.Spec)
	}
	if rs[4].(*api.StagedGlobalNetworkPolicy).Spec.Tier != "security" {
		t.Errorf("Delete keeps its tier: %+v", rs[4])
	}

	for _, format := range []string{"yaml", "json"} {
		var first, second bytes.Buffer
		if err := api.Encode(&first, rs, format, true); err != nil {
			t.Fatal(err)
		}
		back := decodeStaged(t, first.String())
		if !reflect.DeepEqual(back, rs) {
			t.Errorf("%s round trip changed the objects:\n%s", format, first.String())
		}
		if err := api.Encode(&second, back, format, true); err != nil {
			t.Fatal(err)
		}
		if first.String() != second.String() {
			t.Errorf("%s printed differently after a round trip:\n%s\n---\n%s", format, first.String(), second.String())
		}
	}
	var one bytes.Buffer
	if err := api.Encode(&one, rs[2:3], "yaml", false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: StagedKubernetesNetworkPolicy", "stagedAction: Set", "port: 6379", "port: metrics", "endPort: 5990", "cidr: 172.17.0.0/16", "podSelector:\n    matchLabels:\n      role: db"} {
		if !strings.Contains(one.String(), want) {
			t.Errorf("YAML lacks %q:\n%s", want, one.String())
		}
	}
}

// TestStagedKubernetesDefaults: policyTypes are filled as the API
// server fills a NetworkPolicy's, so egress rules are kept; a written
// list stays as it is.
func TestStagedKubernetesDefaults(t *testing.T) {
	t.Parallel()
	const doc = "apiVersion: routed.io/v1\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: p}\nspec:\n"
	for _, c := range []struct{ spec, want string }{
		{"  podSelector: {}\n", "[Ingress]"},
		{"  podSelector: {}\n  egress: [{}]\n", "[Ingress Egress]"},
		{"  podSelector: {}\n  egress: [{}]\n  policyTypes: [Egress]\n", "[Egress]"},
	} {
		p := decodeStaged(t, doc+c.spec)[0].(*api.StagedKubernetesNetworkPolicy)
		if got := fmt.Sprint(p.Spec.PolicyTypes); got != c.want {
			t.Errorf("%q: policyTypes %v, want %s", c.spec, p.Spec.PolicyTypes, c.want)
		}
		if p.Metadata.Namespace != "default" {
			t.Errorf("namespace not defaulted: %q", p.Metadata.Namespace)
		}
	}
}

// TestStagedValidation: every bad staged policy is refused naming the
// field, the staged kind and the object; the twin's rules are the
// twin's own validation (a bad rule, name or selector fails as it fails
// in a NetworkPolicy).
func TestStagedValidation(t *testing.T) {
	t.Parallel()
	const snp = "apiVersion: routed.io/v1\nkind: StagedNetworkPolicy\nmetadata: {name: p, namespace: ns}\nspec:\n"
	const sgnp = "apiVersion: routed.io/v1\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: p}\nspec:\n"
	const sknp = "apiVersion: routed.io/v1\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: p, namespace: ns}\nspec:\n  podSelector: {}\n"
	ingress := func(peer string) string { return sknp + "  ingress:\n  - from: [" + peer + "]\n" }
	port := func(p string) string { return sknp + "  ingress:\n  - ports: [" + p + "]\n" }
	bad := []struct {
		name, in string
		mention  []string
	}{
		{"snp bad name", strings.Replace(snp, "name: p", "name: a.b.c", 1), []string{"StagedNetworkPolicy", "metadata.name", "a.b.c"}},
		{"snp bad namespace", strings.Replace(snp, "namespace: ns", "namespace: a.b", 1), []string{"metadata.namespace"}},
		{"snp bad selector", snp + "  selector: app = 'web'\n", []string{"StagedNetworkPolicy \"ns.p\"", "spec.selector"}},
		{"snp bad rule", snp + "  ingress: [{action: Allow, protocol: TCP, destination: {ports: [70000]}}]\n", []string{"spec.ingress[0].destination.ports[0]", "70000"}},
		{"snp bad tier", snp + "  tier: a.b\n", []string{"spec.tier"}},
		{"snp learn", snp + "  stagedAction: Learn\n", []string{"spec.stagedAction", "Set or Delete", "Learn"}},
		{"snp delete with selector", snp + "  stagedAction: Delete\n  selector: all()\n", []string{"spec", "must be empty", "Delete"}},
		{"snp delete with rules", snp + "  stagedAction: Delete\n  ingress: [{action: Allow}]\n", []string{"must be empty"}},
		{"snp delete bad name", "apiVersion: routed.io/v1\nkind: StagedNetworkPolicy\nmetadata: {name: A, namespace: ns}\nspec: {stagedAction: Delete}\n", []string{"metadata.name"}},
		{"sgnp bad namespace selector", sgnp + "  namespaceSelector: '&&'\n", []string{"StagedGlobalNetworkPolicy", "spec.namespaceSelector"}},
		{"sgnp bad type", sgnp + "  types: [Forward]\n", []string{"spec.types[0]"}},
		{"sgnp delete with order", sgnp + "  stagedAction: Delete\n  order: 10\n", []string{"must be empty"}},
		{"sgnp ignore", sgnp + "  stagedAction: Ignore\n", []string{"spec.stagedAction"}},
		{"sgnp namespaced", "apiVersion: routed.io/v1\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: p, namespace: x}\n", []string{"metadata.namespace", "not namespaced"}},
		{"sgnp unknown field", sgnp + "  selectr: all()\n", []string{"unknown field", "spec.selectr"}},
		{"sknp bad match label", strings.Replace(sknp, "podSelector: {}", "podSelector: {matchLabels: {'a b': c}}", 1), []string{"StagedKubernetesNetworkPolicy", "spec.podSelector.matchLabels"}},
		{"sknp bad label value", strings.Replace(sknp, "podSelector: {}", "podSelector: {matchLabels: {a: 'b c'}}", 1), []string{"spec.podSelector.matchLabels.a"}},
		{"sknp bad operator", strings.Replace(sknp, "podSelector: {}", "podSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}", 1), []string{"spec.podSelector.matchExpressions[0].operator", "Equals"}},
		{"sknp In without values", strings.Replace(sknp, "podSelector: {}", "podSelector: {matchExpressions: [{key: a, operator: In}]}", 1), []string{"spec.podSelector.matchExpressions[0].values", "In"}},
		{"sknp Exists with values", strings.Replace(sknp, "podSelector: {}", "podSelector: {matchExpressions: [{key: a, operator: Exists, values: [b]}]}", 1), []string{"matchExpressions[0].values", "empty"}},
		{"sknp bad expression key", strings.Replace(sknp, "podSelector: {}", "podSelector: {matchExpressions: [{key: '-a', operator: Exists}]}", 1), []string{"matchExpressions[0].key"}},
		{"sknp port zero", port("{port: 0}"), []string{"spec.ingress[0].ports[0].port", "1-65535"}},
		{"sknp port too big", port("{port: 65536}"), []string{"spec.ingress[0].ports[0].port"}},
		{"sknp bad port name", port("{port: Web_Port}"), []string{"spec.ingress[0].ports[0].port", "Web_Port"}},
		{"sknp digits as name", port("{port: '80'}"), []string{"spec.ingress[0].ports[0].port"}},
		{"sknp bad protocol", port("{protocol: ICMP}"), []string{"spec.ingress[0].ports[0].protocol", "TCP, UDP or SCTP"}},
		{"sknp endPort with name", port("{port: web, endPort: 90}"), []string{"spec.ingress[0].ports[0].endPort", "numeric"}},
		{"sknp endPort without port", port("{endPort: 90}"), []string{"spec.ingress[0].ports[0].endPort"}},
		{"sknp endPort below port", port("{port: 100, endPort: 90}"), []string{"spec.ingress[0].ports[0].endPort", "at least"}},
		{"sknp port not a port", port("{port: [1]}"), []string{"port"}},
		{"sknp empty peer", ingress("{}"), []string{"spec.ingress[0].from[0]", "must give a peer"}},
		{"sknp ipBlock and selector", ingress("{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}"), []string{"spec.ingress[0].from[0]", "ipBlock"}},
		{"sknp bad cidr", ingress("{ipBlock: {cidr: 10.0.0.0/33}}"), []string{"spec.ingress[0].from[0].ipBlock.cidr"}},
		{"sknp except outside", ingress("{ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24]}}"), []string{"spec.ingress[0].from[0].ipBlock.except[0]", "strict subset"}},
		{"sknp except equal", ingress("{ipBlock: {cidr: 10.0.0.0/16, except: [10.0.0.0/16]}}"), []string{"ipBlock.except[0]"}},
		{"sknp bad peer selector", sknp + "  egress:\n  - to: [{namespaceSelector: {matchLabels: {'a b': c}}}]\n", []string{"spec.egress[0].to[0].namespaceSelector.matchLabels"}},
		{"sknp bad policy type", sknp + "  policyTypes: [Forward]\n", []string{"spec.policyTypes[0]", "Ingress or Egress"}},
		{"sknp three policy types", sknp + "  policyTypes: [Ingress, Egress, Ingress]\n", []string{"spec.policyTypes", "two"}},
		{"sknp delete with selector", "apiVersion: routed.io/v1\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: p}\nspec: {stagedAction: Delete, podSelector: {matchLabels: {a: b}}}\n", []string{"must be empty"}},
		{"sknp bad name", strings.Replace(sknp, "name: p", "name: P_Q", 1), []string{"metadata.name"}},
		{"sknp unknown field", sknp + "  ingress: [{form: []}]\n", []string{"unknown field", "spec.ingress[].form"}},
	}
	for _, c := range bad {
		refusedNaming(t, c.name, c.in, c.mention)
	}
	good := []string{
		snp + "  stagedAction: Delete\n",
		snp + "  stagedAction: Delete\n  tier: security\n",
		sgnp + "  stagedAction: Set\n  selector: all()\n  egress: [{action: Deny}]\n",
		sknp + "  ingress:\n  - ports: [{port: 1, endPort: 65535}, {protocol: SCTP, port: a-1}]\n    from: [{podSelector: {}, namespaceSelector: {matchExpressions: [{key: team, operator: NotIn, values: [x, 'y']}]}}]\n",
		sknp + "  egress:\n  - to: [{ipBlock: {cidr: '2001:db8::/32', except: ['2001:db8:1::/48']}}]\n",
		"apiVersion: routed.io/v1\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: p.q-r}\nspec: {stagedAction: Delete}\n",
	}
	for _, in := range good {
		decodeStaged(t, in)
	}
}

// refusedNaming checks that in is refused, by decoding or validation,
// with an error that says each of mention.
func refusedNaming(t *testing.T, name, in string, mention []string) {
	t.Helper()
	d, err := api.Decode([]byte(in))
	if err == nil {
		err = d.Resources[0].Validate()
	}
	switch {
	case err == nil:
		t.Errorf("%s: accepted", name)
	case !errors.Is(err, api.ErrInvalid) && !errors.Is(err, api.ErrDecode):
		t.Errorf("%s: error is neither ErrInvalid nor ErrDecode: %v", name, err)
	default:
		for _, m := range mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error does not mention %q: %v", name, m, err)
			}
		}
	}
}

// TestStagedCalicoFieldsAsTwins: a Calico field routed refuses in a
// NetworkPolicy is refused in a StagedNetworkPolicy too, naming the
// staged kind: a preview of something routed could not enforce would
// mislead.
func TestStagedCalicoFieldsAsTwins(t *testing.T) {
	t.Parallel()
	in := "apiVersion: projectcalico.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: p, namespace: ns}\nspec:\n  ingress:\n  - action: Allow\n    http: {methods: [GET]}\n"
	_, err := api.Decode([]byte(in))
	if !errors.Is(err, api.ErrDecode) || !strings.Contains(err.Error(), "StagedNetworkPolicy") || !strings.Contains(err.Error(), "spec.ingress[0].http") {
		t.Fatalf("want the http match refused naming the staged kind, got %v", err)
	}
}

// TestStagedNeverPolicies: no staged kind is a Policy, so nothing that
// programs or models enforced policy takes one; Enforced gives the twin
// with the staged object's name, namespace, labels and spec, without
// its datastore bookkeeping.
func TestStagedNeverPolicies(t *testing.T) {
	t.Parallel()
	for _, k := range []api.Kind{api.KindStagedNetworkPolicy, api.KindStagedGlobalNetworkPolicy, api.KindStagedKubernetesNetworkPolicy} {
		r, err := api.New(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.(api.Policy); ok {
			t.Errorf("%s implements api.Policy: felix or the model would enforce it", k)
		}
	}
	rs := decodeStaged(t, stagedCalico)
	snp := rs[0].(*api.StagedNetworkPolicy)
	snp.Metadata.ResourceVersion, snp.Metadata.UID = "42", "u"
	twin := snp.Enforced()
	if twin.Metadata.Name != snp.Metadata.Name || twin.Metadata.Namespace != "production" || twin.Metadata.ResourceVersion != "" || twin.Metadata.UID != "" ||
		!reflect.DeepEqual(twin.Spec, snp.Spec.NetworkPolicySpec) || twin.GetKind() != api.KindNetworkPolicy {
		t.Errorf("twin %+v of %+v", twin, snp)
	}
	if err := twin.Validate(); err != nil {
		t.Errorf("twin: %v", err)
	}
	gtwin := rs[1].(*api.StagedGlobalNetworkPolicy).Enforced()
	if gtwin.Spec.NamespaceSelector != "team == 'db'" || gtwin.Metadata.Name != "internal-access.allow-tcp-6379" {
		t.Errorf("global twin %+v", gtwin)
	}
}

// TestAPILinksNoKubernetesTypes: pkg/api is in the node binary; the
// staged Kubernetes spec is routed's own type so that k8s.io/api (and
// with it the apimachinery runtime) stays out of it.
func TestAPILinksNoKubernetesTypes(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/routed-net/routed/pkg/api").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/api/") || strings.HasPrefix(dep, "k8s.io/apimachinery/pkg/runtime") {
			t.Errorf("pkg/api links %s", dep)
		}
	}
}

// TestStagedFieldNamesAnyCase: field names are read in any case, as
// calicoctl reads them, in the staged kinds too (the Kubernetes spec's
// included); a port stays a port.
func TestStagedFieldNamesAnyCase(t *testing.T) {
	t.Parallel()
	rs := decodeStaged(t, `apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: p, namespace: ns}
spec: {StagedAction: Delete, Tier: default}
---
apiVersion: projectcalico.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: k, namespace: ns}
spec:
  PodSelector: {MatchLabels: {app: db}}
  Ingress: [{From: [{IPBlock: {CIDR: 10.0.0.0/8}}], Ports: [{Port: 80, EndPort: 90}]}]
`)
	if p := rs[0].(*api.StagedNetworkPolicy); p.Action() != api.StagedActionDelete {
		t.Errorf("StagedAction: %+v", p.Spec)
	}
	k := rs[1].(*api.StagedKubernetesNetworkPolicy).Spec
	if k.PodSelector.MatchLabels["app"] != "db" || k.Ingress[0].From[0].IPBlock.CIDR != "10.0.0.0/8" || k.Ingress[0].Ports[0].Port.Num != 80 || *k.Ingress[0].Ports[0].EndPort != 90 {
		t.Errorf("Kubernetes spec read in any case: %+v", k)
	}
}
