package cli

import (
	"strings"
	"testing"
)

// TestMigrateCalicoRefusesPolicyLoss: a Calico policy that denies SSH
// to the databases also has a Pass rule matching HTTP, which routed
// cannot carry (no application-layer proxy) nor narrow (dropping a Pass
// lets its traffic meet its tier's later rules). `routedctl migrate
// calico` names it as a POLICY LOSS, with why and what would be allowed
// without it, and exits non-zero writing nothing, plan and run alike,
// telling the operator how to proceed. A policy with an Allow rule
// matching HTTP is carried narrowed and listed so. With
// --accept-policy-loss the rest is carried and the loss warned about on
// stderr; a second run with the flag is a no-op, without it refused.
func TestMigrateCalicoRefusesPolicyLoss(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	const res = "/calico/resources/v3/projectcalico.org/"
	putKeys(t, ep, map[string]string{
		res + "ippools/default-ipv4-ippool": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":"10.247.0.0/16","blockSize":26}}`,
		res + "globalnetworkpolicies/default.db-guard": `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.db-guard"},"spec":{"tier":"default","selector":"app == 'db'",
		 "ingress":[{"action":"Deny","protocol":"TCP","destination":{"ports":[22]}},{"action":"Pass","protocol":"TCP","http":{"methods":["GET"]}}]}}`,
		res + "networkpolicies/shop/default.web-gets": `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.web-gets","namespace":"shop"},"spec":{"tier":"default","selector":"app == 'web'",
		 "ingress":[{"action":"Allow","protocol":"TCP","http":{"methods":["GET"]}}]}}`,
	})
	loss := "POLICY LOSS: GlobalNetworkPolicy default.db-guard cannot be carried ("
	for _, args := range [][]string{{"--dry-run"}, nil} {
		out, errOut, code := ctl(t, ep, "", append([]string{"migrate", "calico", "--from-etcd", ep}, args...)...)
		for _, want := range []string{loss, "spec.ingress[1].http",
			"traffic its 1 Deny rule(s) denied would be allowed",
			"Narrowed: NetworkPolicy shop.default.web-gets: spec.ingress[0] (Allow with an HTTP match) dropped",
			"1 not carried over (1 enforcing policy, refused), 1 narrowed"} {
			if !strings.Contains(out, want) {
				t.Errorf("migrate %v: output lacks %q", args, want)
			}
		}
		if code == 0 || !strings.Contains(errOut, "GlobalNetworkPolicy default.db-guard") || !strings.Contains(errOut, "nothing was written") ||
			!strings.Contains(errOut, "--accept-policy-loss") {
			t.Errorf("migrate %v: code %d, want refused naming the policy and the flag\n%s%s", args, code, out, errOut)
		}
		if out, _, code := ctl(t, ep, "", "get", "ippool", "default-ipv4-ippool"); code == 0 {
			t.Fatalf("migrate %v was refused but wrote the pool:\n%s", args, out)
		}
	}

	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep, "--accept-policy-loss")
	if code != 0 || !strings.Contains(out, "Migrated: 2 to create") || !strings.Contains(out, "(1 enforcing policy, loss accepted)") ||
		!strings.Contains(errOut, "WARNING: policy lost: GlobalNetworkPolicy default.db-guard") {
		t.Fatalf("migrate --accept-policy-loss: code %d\n%s%s", code, out, errOut)
	}
	out, _, _ = ctl(t, ep, "", "get", "networkpolicy", "shop/default.web-gets", "-o", "yaml")
	if !strings.Contains(out, "- Ingress") || strings.Contains(out, "action: Allow") || !strings.Contains(out, "routed.io/migrate-narrowed") {
		t.Errorf("narrowed policy, want Ingress with no rule, annotated:\n%s", out)
	}

	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep, "--accept-policy-loss")
	if code != 0 || !strings.Contains(out, "0 to create, 0 to update, 2 unchanged, 0 conflicts") {
		t.Errorf("second run: code %d, want a no-op\n%s%s", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code == 0 || !strings.Contains(out, loss) {
		t.Errorf("second run without the flag: code %d, want refused\n%s%s", code, out, errOut)
	}
}
