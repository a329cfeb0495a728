package cli

import (
	"strings"
	"testing"
)

const policyFile = `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: security.allow-web, namespace: shop}
spec:
  tier: security
  order: 10
  selector: app == 'web'
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: app == 'lb'}
    destination: {ports: [80, "8080:8090", http]}
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: crd.projectcalico.org/v1
kind: GlobalNetworkPolicy
metadata: {name: deny-blocked}
spec:
  egress:
  - action: Deny
    destination: {selector: blocked == 'true'}
---
apiVersion: routed.io/v1
kind: GlobalNetworkSet
metadata: {name: blocked, labels: {blocked: "true"}}
spec: {nets: [198.51.100.0/24]}
---
apiVersion: routed.io/v1
kind: NetworkSet
metadata: {name: partners, namespace: shop}
spec: {nets: [192.0.2.7]}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.shop}
spec: {labelsToApply: {pcns.team: web}}
`

// TestPolicyKindsThroughRoutedctl: the six kinds go in through apply in
// YAML, Calico and CRD forms, print as tables and as YAML that applies
// back, are named NAMESPACE/NAME or with -n, and the guards hold: a
// policy in a missing tier writes nothing, a tier with policies and the
// default tiers cannot be deleted.
func TestPolicyKindsThroughRoutedctl(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)

	// A policy whose tier exists nowhere: refused before any write.
	bad := strings.Replace(policyFile, "tier: security", "tier: nope", 1)
	out, errOut, code := ctl(t, ep, bad, "apply", "-f", "-")
	if code == 0 || !strings.Contains(errOut, `spec.tier "nope"`) || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("policy in a missing tier: code %d\n%s%s", code, out, errOut)
	}
	if out, _, _ := ctl(t, ep, "", "get", "globalnetworksets"); strings.Contains(out, "blocked") {
		t.Fatalf("something was written:\n%s", out)
	}

	// The policy comes before its tier in the file: tiers go first.
	if out, errOut, code := ctl(t, ep, policyFile, "apply", "-f", "-"); code != 0 || !strings.Contains(out, "6 resource(s)") {
		t.Fatalf("apply: code %d\n%s%s", code, out, errOut)
	}
	out, _, _ = ctl(t, ep, "", "get", "tiers")
	for _, want := range []string{"kube-admin", "1000", "Pass", "default", "1e+06", "Deny", "kube-baseline", "1e+07", "security", "100"} {
		if !strings.Contains(out, want) {
			t.Errorf("tiers table lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = ctl(t, ep, "", "get", "networkpolicies", "-n", "shop")
	if !strings.Contains(out, "shop/security.allow-web") || !strings.Contains(out, "security") {
		t.Errorf("policies table:\n%s", out)
	}
	yamlOut, errOut, code := ctl(t, ep, "", "get", "networkpolicy", "shop/security.allow-web", "-o", "yaml")
	if code != 0 || !strings.Contains(yamlOut, "namespace: shop") || !strings.Contains(yamlOut, "8080:8090") {
		t.Fatalf("get -o yaml: code %d\n%s%s", code, yamlOut, errOut)
	}
	if out, errOut, code := ctl(t, ep, yamlOut, "apply", "-f", "-"); code != 0 {
		t.Fatalf("re-apply of get -o yaml: code %d\n%s%s", code, out, errOut)
	}
	out, _, _ = ctl(t, ep, "", "get", "netset", "-n", "shop", "partners", "-o", "json")
	if !strings.Contains(out, `"192.0.2.7/32"`) {
		t.Errorf("network set:\n%s", out)
	}

	for _, args := range [][]string{{"delete", "tier", "security"}, {"delete", "tier", "default"}} {
		out, errOut, code := ctl(t, ep, "", args...)
		if code == 0 || !strings.Contains(errOut, "tier in use") {
			t.Errorf("%v: code %d\n%s%s", args, code, out, errOut)
		}
	}
	if out, errOut, code := ctl(t, ep, "", "delete", "networkpolicy", "-n", "shop", "security.allow-web"); code != 0 {
		t.Fatalf("delete policy: code %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := ctl(t, ep, "", "delete", "tier", "security"); code != 0 {
		t.Fatalf("delete empty tier: code %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := ctl(t, ep, policyFile, "delete", "-f", "-"); code == 0 || !strings.Contains(errOut, "not found") {
		// The policy and tier are gone already: delete -f reports it.
		t.Errorf("delete -f of removed objects: code %d\n%s%s", code, out, errOut)
	}
}
