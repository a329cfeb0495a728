package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplyAnyCaseAndErrorsNameFiles runs routedctl as a calicoctl user
// would: field names in any case apply (a Tier with Order:), and every
// error, from decoding, validation, the datastore or delete, names the
// file and the document it is about, with nothing written when any
// document is wrong.
func TestApplyAnyCaseAndErrorsNameFiles(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", `apiVersion: projectcalico.org/v3
Kind: Tier
Metadata:
  Name: security
Spec:
  Order: 100
  DefaultAction: Deny
`)
	policy := func(action string) string {
		return `apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: blocked
  labels: {Blocked: "true"}
spec:
  Nets: [198.51.100.0/24]
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: x
spec:
  Tier: security
  Selector: app == 'web'
  Ingress:
  - Action: ` + action + `
    Source:
      Selector: Blocked == 'true'
`
	}
	bad := write("b.yaml", policy("Alow"))

	_, errOut, code := ctl(t, ep, "", "apply", "-f", a, "-f", bad)
	if code == 0 {
		t.Fatal("apply with an invalid action succeeded")
	}
	want := bad + ": document 2 (NetworkPolicy default/x): spec.ingress[0].action: "
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q does not contain %q", errOut, want)
	}
	if strings.Contains(errOut, "map[") {
		t.Errorf("Go map syntax in %q", errOut)
	}
	if out, _, _ := ctl(t, ep, "", "get", "tiers"); strings.Contains(out, "security") {
		t.Errorf("tier written although a later file was refused:\n%s", out)
	}

	good := write("b.yaml", policy("Deny"))
	if out, errOut, code := ctl(t, ep, "", "apply", "-f", a, "-f", good); code != 0 || !strings.Contains(out, "Successfully applied 3 resource(s)") {
		t.Fatalf("apply: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := ctl(t, ep, "", "get", "tier", "security", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "order: 100") || !strings.Contains(out, "defaultAction: Deny") {
		t.Errorf("tier as read back (code %d):\n%s%s", code, out, errOut)
	}
	out, _, _ = ctl(t, ep, "", "get", "globalnetworksets", "blocked", "-o", "yaml")
	if !strings.Contains(out, "Blocked: \"true\"") {
		t.Errorf("label key case not kept:\n%s", out)
	}

	// The same field twice in two cases is refused, naming both keys.
	dup := write("dup.yaml", "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t2}\nspec: {order: 1, Order: 2}\n")
	_, errOut, code = ctl(t, ep, "", "apply", "-f", dup)
	if want := dup + `: document 1 (Tier t2): spec.order: "Order" and "order" name the same field`; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("duplicate keys: code %d, stderr %q, want %q", code, errOut, want)
	}

	// Datastore errors name the document too.
	_, errOut, code = ctl(t, ep, "", "create", "-f", good)
	if want := good + ": document 1 (GlobalNetworkSet blocked): "; code == 0 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "already exists") {
		t.Errorf("create again: code %d, stderr %q, want %q", code, errOut, want)
	}
	// A policy whose tier exists nowhere is named before anything is written.
	orphan := write("orphan.yaml", "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: o}\nspec: {tier: nowhere, selector: all()}\n")
	_, errOut, code = ctl(t, ep, "", "apply", "-f", orphan)
	if want := orphan + ": document 1 (GlobalNetworkPolicy o): "; code == 0 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "nowhere") {
		t.Errorf("missing tier: code %d, stderr %q, want %q", code, errOut, want)
	}

	// delete -f: Calico delete files in any case, errors located.
	del := write("del.yaml", "APIVersion: projectcalico.org/v3\nKind: NetworkPolicy\nMetadata: {Name: x}\n---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: ghost, namespace: shop}\n")
	_, errOut, code = ctl(t, ep, "", "delete", "-f", del)
	if want := del + ": document 2 (NetworkPolicy shop/ghost): "; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("delete: code %d, stderr %q, want %q", code, errOut, want)
	}
	if out, _, _ := ctl(t, ep, "", "get", "networkpolicies", "-n", "default"); strings.Contains(out, " x ") || strings.Contains(out, "\nx") {
		t.Errorf("policy x not deleted:\n%s", out)
	}

	// FelixConfiguration: a refused field names file, document and why;
	// warned fields are named with their file; honoured ones read back.
	fc := write("felix.yaml", "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {IPIPMTU: 1400, chainInsertMode: Append}\n---\n"+
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.worker-1}\nspec: {bpfEnabled: true}\n")
	_, errOut, code = ctl(t, ep, "", "apply", "-f", fc)
	if want := fc + ": document 2 (FelixConfiguration node.worker-1): Calico field spec.bpfEnabled (true) cannot be ignored: routed has no eBPF dataplane"; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("refused FelixConfiguration: code %d, stderr %q, want %q", code, errOut, want)
	}
	fc = write("felix.yaml", "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {IPIPMTU: 1400, chainInsertMode: Append}\n")
	_, errOut, code = ctl(t, ep, "", "apply", "-f", fc)
	if want := "Warning: " + fc + ": document 1 (FelixConfiguration default): Calico field spec.chainInsertMode is not used by routed"; code != 0 || !strings.Contains(errOut, want) {
		t.Errorf("FelixConfiguration: code %d, stderr %q, want %q", code, errOut, want)
	}
	if out, _, _ = ctl(t, ep, "", "get", "felixconfigurations", "default", "-o", "yaml"); !strings.Contains(out, "ipipMTU: 1400") {
		t.Errorf("FelixConfiguration as read back:\n%s", out)
	}
}
