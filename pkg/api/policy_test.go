package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func decodeModelFile(t *testing.T) []api.Resource {
	t.Helper()
	data, err := os.ReadFile("testdata/policy-model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := mustDecode(t, string(data))
	if len(d.Warnings) > 0 {
		t.Fatalf("warnings: %v", d.Warnings)
	}
	for _, r := range d.Resources {
		if err := r.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
	}
	return d.Resources
}

// TestPolicyModelDecode: every field of the six kinds lands where felix
// reads it, with Calico's number-or-string forms resolved.
func TestPolicyModelDecode(t *testing.T) {
	t.Parallel()
	rs := decodeModelFile(t)
	want := []string{"Tier/security", "NetworkPolicy/allow-web", "GlobalNetworkPolicy/deny-blocked", "Profile/kns.shop", "NetworkSet/partners", "GlobalNetworkSet/blocked"}
	if got := names(rs); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	tier := rs[0].(*api.Tier)
	if *tier.Spec.Order != 100 || *tier.Spec.DefaultAction != api.ActionPass {
		t.Errorf("tier spec = order %v action %v", *tier.Spec.Order, *tier.Spec.DefaultAction)
	}

	np := rs[1].(*api.NetworkPolicy)
	if np.Metadata.Namespace != "shop" || api.StoreName(np) != "shop.allow-web" {
		t.Errorf("namespace %q store name %q", np.Metadata.Namespace, api.StoreName(np))
	}
	if np.Spec.Tier != "security" || *np.Spec.Order != 10.5 || np.Spec.ServiceAccountSelector != "role == 'frontend'" {
		t.Errorf("policy spec = %+v", np.Spec.PolicySpec)
	}
	in := np.Spec.Ingress[0]
	if n, ok := in.Protocol.Num(); !ok || n != 6 || *in.IPVersion != 4 {
		t.Errorf("ingress[0] protocol %v ipVersion %v", in.Protocol, *in.IPVersion)
	}
	wantSrcPorts := []api.Port{api.SinglePort(1024), api.PortRange(2000, 3000), api.NamedPort("metrics")}
	if !reflect.DeepEqual(in.Source.Ports, wantSrcPorts) {
		t.Errorf("source ports = %+v, want %+v", in.Source.Ports, wantSrcPorts)
	}
	if sa := in.Source.ServiceAccounts; sa == nil || !reflect.DeepEqual(sa.Names, []string{"lb", "proxy"}) || sa.Selector != "tier == 'edge'" {
		t.Errorf("serviceAccounts = %+v", sa)
	}
	if !reflect.DeepEqual(in.Destination.NotPorts, []api.Port{api.PortRange(8080, 8090)}) {
		t.Errorf("notPorts = %+v", in.Destination.NotPorts)
	}
	icmp := np.Spec.Ingress[1]
	if n, _ := icmp.Protocol.Num(); n != 1 || *icmp.ICMP.Type != 8 || *icmp.ICMP.Code != 0 || icmp.Action != api.ActionLog {
		t.Errorf("icmp rule = %+v", icmp)
	}
	if n, _ := np.Spec.Ingress[2].Protocol.Num(); n != 58 || *np.Spec.Ingress[2].NotICMP.Type != 128 || np.Spec.Ingress[2].NotICMP.Code != nil {
		t.Errorf("notICMP rule = %+v", np.Spec.Ingress[2])
	}
	if n, _ := np.Spec.Ingress[3].NotProtocol.Num(); n != 17 {
		t.Errorf("notProtocol rule = %+v", np.Spec.Ingress[3])
	}
	// A quoted number is the number, as Calico reads it.
	if eg := np.Spec.Egress[0]; eg.Protocol.Name != "" || eg.Protocol.Number != 17 || eg.Action != api.ActionPass {
		t.Errorf("egress[0] = %+v", eg)
	}

	gnp := rs[2].(*api.GlobalNetworkPolicy)
	if gnp.Spec.NamespaceSelector != "env == 'prod'" {
		t.Errorf("gnp namespaceSelector %q", gnp.Spec.NamespaceSelector)
	}
	if ns := rs[4].(*api.NetworkSet); api.StoreName(ns) != "shop.partners" || len(ns.Spec.Nets) != 2 {
		t.Errorf("network set %q %v", api.StoreName(ns), ns.Spec.Nets)
	}
	if p := rs[3].(*api.Profile); p.Spec.LabelsToApply["pcns.team"] != "web" || len(p.Spec.Ingress) != 1 {
		t.Errorf("profile = %+v", p.Spec)
	}
}

// TestPolicyDefaults: Calico's defaults — tier "default", types from the
// rule lists present, tier defaultAction Deny, order left nil (last).
func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	cases := []struct{ spec, want string }{
		{`{}`, "Ingress"},
		{`{ingress: [{action: Allow}]}`, "Ingress"},
		{`{egress: [{action: Allow}]}`, "Egress"},
		{`{ingress: [{action: Allow}], egress: [{action: Allow}]}`, "Ingress,Egress"},
		{`{types: [Egress], ingress: [{action: Allow}]}`, "Egress"},
	}
	for _, c := range cases {
		d := mustDecode(t, "apiVersion: routed.io/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: p}\nspec: "+c.spec+"\n")
		p := d.Resources[0].(*api.GlobalNetworkPolicy)
		var types []string
		for _, ty := range p.Spec.Types {
			types = append(types, string(ty))
		}
		if got := strings.Join(types, ","); got != c.want {
			t.Errorf("spec %s: types %s, want %s", c.spec, got, c.want)
		}
		if p.Spec.Tier != "default" || p.Spec.Order != nil {
			t.Errorf("spec %s: tier %q order %v, want default and nil", c.spec, p.Spec.Tier, p.Spec.Order)
		}
	}
	d := mustDecode(t, "apiVersion: routed.io/v1\nkind: Tier\nmetadata: {name: t}\n")
	if tr := d.Resources[0].(*api.Tier); tr.Spec.DefaultAction == nil || *tr.Spec.DefaultAction != api.ActionDeny || tr.Spec.Order != nil {
		t.Errorf("tier defaults = %+v", tr.Spec)
	}
}

// TestPolicyModelRoundTrip: what get -o yaml/json prints, apply reads
// back to the same objects; single ports print as numbers, ranges and
// names as strings, as Calico prints them.
func TestPolicyModelRoundTrip(t *testing.T) {
	t.Parallel()
	rs := decodeModelFile(t)
	for _, format := range []string{"yaml", "json"} {
		var buf bytes.Buffer
		if err := api.Encode(&buf, rs, format, true); err != nil {
			t.Fatal(err)
		}
		back := mustDecode(t, buf.String()).Resources
		if !reflect.DeepEqual(back, rs) {
			t.Errorf("%s round trip changed the objects:\n%s", format, buf.String())
		}
	}
	raw, err := json.Marshal(rs[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ports":[1024,"2000:3000","metrics"]`, `"protocol":"TCP"`, `"protocol":17`, `"namespace":"shop"`, `"icmp":{"type":8,"code":0}`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("JSON lacks %s:\n%s", want, raw)
		}
	}
	if strings.Contains(string(raw), `"source":{}`) {
		t.Errorf("empty entity rules are printed:\n%s", raw)
	}
}

func TestDefaultTiers(t *testing.T) {
	t.Parallel()
	// Calico's orders; the Kubernetes admin and baseline tiers pass what
	// their policies leave undecided.
	want := map[string]float64{"kube-admin": 1000, "default": 1e6, "kube-baseline": 1e7}
	action := map[string]api.Action{"kube-admin": api.ActionPass, "default": api.ActionDeny, "kube-baseline": api.ActionPass}
	for _, tr := range api.DefaultTiers() {
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		if o, ok := want[tr.Metadata.Name]; !ok || *tr.Spec.Order != o || *tr.Spec.DefaultAction != action[tr.Metadata.Name] {
			t.Errorf("tier %s order %v action %v", tr.Metadata.Name, *tr.Spec.Order, *tr.Spec.DefaultAction)
		}
		delete(want, tr.Metadata.Name)
	}
	if len(want) > 0 {
		t.Errorf("missing tiers %v", want)
	}
}

func TestNamespacedNames(t *testing.T) {
	t.Parallel()
	if ns, n := api.SplitStoreName(api.KindNetworkPolicy, "shop.sec.allow"); ns != "shop" || n != "sec.allow" {
		t.Errorf("split = %q %q", ns, n)
	}
	if ns, n := api.SplitStoreName(api.KindGlobalNetworkPolicy, "sec.allow"); ns != "" || n != "sec.allow" {
		t.Errorf("split global = %q %q", ns, n)
	}
	_, err := api.Decode([]byte("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p, namespace: x}\nspec: {cidr: 10.0.0.0/16}\n"))
	if err == nil || !strings.Contains(err.Error(), "metadata.namespace") {
		t.Errorf("namespace on a cluster kind: %v", err)
	}
	// No namespace is "default", as calicoctl and kubectl have it.
	d := mustDecode(t, "apiVersion: routed.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\n")
	if r := d.Resources[0]; r.Validate() != nil || api.StoreName(r) != "default.p" {
		t.Errorf("namespaced kind without namespace: %q %v", api.StoreName(r), r.Validate())
	}
	// Built in code without defaults, it is refused.
	np := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "p"}}
	np.Spec.Tier = "default"
	if err := np.Validate(); err == nil || !strings.Contains(err.Error(), "metadata.namespace: is required") {
		t.Errorf("namespaced kind without namespace: %v", err)
	}
	for _, k := range []string{"networkpolicy", "networkpolicies", "gnp", "tiers", "profile", "networksets", "globalnetworkset"} {
		if _, err := api.ParseKind(k); err != nil {
			t.Errorf("ParseKind(%q): %v", k, err)
		}
	}
	if got := api.KindNetworkPolicy.Plural(); got != "networkpolicies" {
		t.Errorf("plural %q", got)
	}
}
