package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	routedctl "github.com/routed-net/routed/routed/ctl"
	"github.com/routed-net/routed/tests/testbin"
)

// stagedModel is two pods of namespace shop (client 10.66.0.1 and web
// 10.66.0.2, whose namespace profile allows everything), an enforced
// policy letting the client reach the web pod on TCP 8080, and staged
// policies of each kind in Calico's forms: a global deny of TCP into
// the web pod ahead of it, a Kubernetes deny-all for shop (converted at
// order 1000, ahead of the enforced policy, which has no order, and
// matching nothing itself), and a Delete of the enforced policy.
const stagedModel = `apiVersion: routed.io/v1
kind: Profile
metadata: {name: kns.shop}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: st--node-k8s-shop-client-eth0, labels: {app: client}}
spec: {node: st-node, orchestrator: k8s, namespace: shop, pod: client, containerID: c1, interfaceName: calist1, ipNetworks: [10.66.0.1/32], profiles: [kns.shop]}
---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: st--node-k8s-shop-web-eth0, labels: {app: web}}
spec: {node: st-node, orchestrator: k8s, namespace: shop, pod: web, containerID: c2, interfaceName: calist2, ipNetworks: [10.66.0.2/32], profiles: [kns.shop]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: allow-web, namespace: shop}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [8080]}}]
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: deny-web}
spec:
  order: 10
  selector: app == 'web'
  types: [Ingress]
  ingress: [{action: Log, protocol: TCP}, {action: Deny, protocol: TCP}]
---
apiVersion: projectcalico.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: default-deny, namespace: shop}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: allow-web, namespace: shop}
spec: {stagedAction: Delete}
`

// stagedBookkeeping is what a write changes in a printed object.
var stagedBookkeeping = regexp.MustCompile(`(?m)^\s*(resourceVersion|creationTimestamp|uid): .*\n`)

// TestStagedPoliciesThroughRoutedctl: the staged kinds apply in
// Calico's form, print in get's tables, and get -o yaml applies back
// and prints the same document; policy explain gives the enforced
// verdict (allowed by the enforced policy's rule, checked against no
// kernel here) and then each staged policy's: the staged deny denies,
// naming its own rule, the Kubernetes deny-all leaves the flow to the
// enforced allow after it, the Delete leaves it to the namespace
// profile, and all of them together deny by the staged deny's rule; a
// bad staged policy, or one in a tier that does not exist,
// is refused naming its field and writes nothing.
func TestStagedPoliciesThroughRoutedctl(t *testing.T) {
	t.Parallel()
	testbin.Path(t, "routedctl") // built before ctl's deadline starts
	ep := startEtcd(t)
	if out, errOut, code := ctl(t, ep, stagedModel, "apply", "-f", "-"); code != 0 || !strings.Contains(out, "7 resource(s)") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "sgnp"}, []string{"ACTION", "deny-web", "Set", "default", "10", "app == 'web'"}},
		{[]string{"get", "stagednetworkpolicies", "-n", "shop"}, []string{"shop/allow-web", "Delete"}},
		{[]string{"get", "sknp", "-o", "wide"}, []string{"shop/default-deny", "Set", "(all pods)", "Ingress", "0 rules"}},
	} {
		out, errOut, code := ctl(t, ep, "", c.args...)
		for _, w := range c.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("%v: exit %d, lacks %q:\n%s%s", c.args, code, w, out, errOut)
			}
		}
	}
	for _, name := range [][]string{{"sgnp", "deny-web"}, {"sknp", "shop/default-deny"}, {"snp", "shop/allow-web"}} {
		first, errOut, code := ctl(t, ep, "", "get", name[0], name[1], "-o", "yaml")
		if code != 0 {
			t.Fatalf("get %v: exit %d\n%s", name, code, errOut)
		}
		if out, errOut, code := ctl(t, ep, first, "apply", "-f", "-"); code != 0 {
			t.Fatalf("re-apply of get %v -o yaml: exit %d\n%s%s", name, code, out, errOut)
		}
		again, _, _ := ctl(t, ep, "", "get", name[0], name[1], "-o", "yaml")
		if a, b := stagedBookkeeping.ReplaceAllString(first, ""), stagedBookkeeping.ReplaceAllString(again, ""); a != b {
			t.Errorf("get %v printed another document after re-applying its own:\n%s---\n%s", name, a, b)
		}
	}

	out, errOut, code := ctl(t, ep, "", "policy", "explain", "shop/client", "shop/web", "tcp/8080", "-o", "json")
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s%s", code, out, errOut)
	}
	var r routedctl.ExplainResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	if !r.Allowed || r.Ingress.Rule.Policy != "np:shop/allow-web" || r.Ingress.Rule.Index != 0 || r.Ingress.Rule.Action != "Allow" {
		t.Errorf("enforced: allowed %v, ingress %+v", r.Allowed, r.Ingress.Rule)
	}
	byPolicy := map[string]policy.StagedVerdict{}
	for _, v := range r.Staged {
		byPolicy[v.Policy] = v
	}
	if len(byPolicy) != 3 {
		t.Fatalf("want 3 staged verdicts, got %+v", r.Staged)
	}
	deny := byPolicy["staged:sgnp:deny-web"]
	if deny.Allowed || deny.Ingress == nil || deny.Egress != nil {
		t.Fatalf("staged deny: %+v", deny)
	}
	if rule := deny.Ingress.Rule; rule.Kind != policy.KindStagedPolicyRule || rule.Policy != "staged:sgnp:deny-web" || rule.Index != 1 || rule.Action != "Deny" || rule.ID != "" {
		t.Errorf("staged deny decided by %+v", rule)
	}
	if l := deny.Ingress.Logged; len(l) != 1 || l[0].Policy != "staged:sgnp:deny-web" || l[0].Index != 0 {
		t.Errorf("staged deny logged by %+v", l)
	}
	// Kubernetes policies add up: the deny-all matches nothing itself,
	// and the enforced allow after it in the tier still allows.
	if k := byPolicy["staged:sknp:shop/default-deny"]; !k.Allowed || k.Changed || k.Twin != "np:shop/knp.default.default-deny" || k.Ingress == nil || k.Ingress.Rule.Policy != "np:shop/allow-web" {
		t.Errorf("staged Kubernetes deny-all: %+v %+v", k, k.Ingress)
	}
	if d := byPolicy["staged:snp:shop/allow-web"]; !d.Allowed || !d.TwinExists || !d.Changed || d.Ingress == nil || d.Ingress.Rule.Profile != "kns.shop" {
		t.Errorf("staged Delete of allow-web: %+v %+v", d, d.Ingress)
	}

	if all := r.StagedTogether; all == nil || all.Allowed || all.Ingress == nil || all.Ingress.Rule.Policy != "staged:sgnp:deny-web" || all.Egress == nil || !all.Egress.Allowed {
		t.Errorf("all staged policies together: %+v", all)
	}

	out, errOut, code = ctl(t, ep, "", "policy", "explain", "shop/client", "shop/web", "tcp/8080")
	for _, want := range []string{
		"verdict: allowed",
		"ingress of st--node-k8s-shop-web-eth0 on st-node: allowed by tier default, policy np:shop/allow-web, ingress rule 0 (Allow)",
		"staged:sgnp:deny-web (StagedGlobalNetworkPolicy Set, adds gnp:deny-web)",
		"denied by tier default, staged:sgnp:deny-web, ingress rule 1 (Deny)",
		"logged by tier default, staged:sgnp:deny-web, ingress rule 0 (Log)",
		"staged verdict: denied (enforced: allowed)",
		"staged:snp:shop/allow-web (StagedNetworkPolicy Delete, removes np:shop/allow-web)",
		"staged verdict: allowed (as enforced, by another rule)",
		"all staged policies together:",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("explain: exit %d, lacks %q:\n%s%s", code, want, out, errOut)
		}
	}

	if out, errOut, code := ctl(t, ep, "", "delete", "sknp", "-n", "shop", "default-deny"); code != 0 {
		t.Errorf("delete sknp: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := ctl(t, ep, "", "policy", "explain", "shop/client", "shop/web", "tcp/8080", "-o", "json"); code != 0 || strings.Contains(out, "default-deny") {
		t.Errorf("explain after the staged policy was deleted: exit %d\n%s%s", code, out, errOut)
	}

	noTier := "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: nowhere}\nspec: {tier: nope, selector: all()}\n"
	if out, errOut, code := ctl(t, ep, noTier, "apply", "-f", "-"); code == 0 || !strings.Contains(errOut, `spec.tier "nope"`) || !strings.Contains(errOut, "nothing was written") {
		t.Errorf("staged policy in a missing tier: exit %d\n%s%s", code, out, errOut)
	}
	bad := "apiVersion: projectcalico.org/v3\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: bad, namespace: shop}\nspec: {podSelector: {}, ingress: [{ports: [{port: 0}]}]}\n"
	if out, errOut, code := ctl(t, ep, bad, "apply", "-f", "-"); code == 0 || !strings.Contains(errOut, "spec.ingress[0].ports[0].port") {
		t.Errorf("bad staged policy: exit %d\n%s%s", code, out, errOut)
	}
	for _, kind := range []string{"sknp", "sgnp"} {
		if out, _, _ := ctl(t, ep, "", "get", kind); strings.Contains(out, "bad") || strings.Contains(out, "nowhere") {
			t.Errorf("a refused staged policy was written:\n%s", out)
		}
	}
}
