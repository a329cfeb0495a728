package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestServiceRuleValidation: Calico's constraints on services in a
// rule, each refused with the field named, and the uses Calico allows
// taken, from a NetworkPolicy, a GlobalNetworkPolicy and a Profile.
func TestServiceRuleValidation(t *testing.T) {
	t.Parallel()
	const np = "apiVersion: routed.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: shop}\nspec:\n"
	const gnp = "apiVersion: routed.io/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: p}\nspec:\n"
	const pro = "apiVersion: routed.io/v1\nkind: Profile\nmetadata: {name: pro}\nspec:\n"
	in := func(head, r string) string { return head + "  ingress:\n  - " + r + "\n" }
	eg := func(head, r string) string { return head + "  egress:\n  - " + r + "\n" }
	bad := []struct {
		name, in string
		mention  []string
	}{
		{"no name", eg(np, "{action: Allow, destination: {services: {namespace: shop}}}"), []string{"spec.egress[0].destination.services.name", "is required"}},
		{"bad name", eg(np, "{action: Allow, destination: {services: {name: Web_1}}}"), []string{"spec.egress[0].destination.services.name", "Web_1"}},
		{"bad namespace", in(np, "{action: Allow, source: {services: {name: web, namespace: a.b}}}"), []string{"spec.ingress[0].source.services.namespace", "a.b"}},
		{"with selector", eg(np, "{action: Allow, destination: {services: {name: web}, selector: app == 'x'}}"), []string{"spec.egress[0].destination.services", "selector"}},
		{"with notSelector", eg(np, "{action: Allow, destination: {services: {name: web}, notSelector: app == 'x'}}"), []string{"spec.egress[0].destination.services", "notSelector"}},
		{"with namespaceSelector", in(np, "{action: Allow, source: {services: {name: web}, namespaceSelector: all()}}"), []string{"spec.ingress[0].source.services", "namespaceSelector"}},
		{"with nets", in(np, "{action: Allow, source: {services: {name: web}, nets: [10.0.0.0/8]}}"), []string{"spec.ingress[0].source.services", "nets"}},
		{"with notNets", eg(np, "{action: Allow, destination: {services: {name: web}, notNets: [10.0.0.0/8]}}"), []string{"spec.egress[0].destination.services", "notNets"}},
		{"with serviceAccounts", in(np, "{action: Allow, source: {services: {name: web}, serviceAccounts: {names: [a]}}}"), []string{"spec.ingress[0].source.services", "serviceAccounts"}},
		{"destination ports", eg(np, "{action: Allow, protocol: TCP, destination: {services: {name: web}, ports: [80]}}"), []string{"spec.egress[0].destination.ports", "Service's own ports"}},
		{"destination notPorts", eg(np, "{action: Allow, protocol: TCP, destination: {services: {name: web}, notPorts: [80]}}"), []string{"spec.egress[0].destination.notPorts"}},
		{"egress source", eg(np, "{action: Allow, source: {services: {name: web}}}"), []string{"spec.egress[0].source.services", "egress rule's source"}},
		{"ingress destination", in(np, "{action: Allow, destination: {services: {name: web}}}"), []string{"spec.ingress[0].destination.services", "ingress rule's destination"}},
		{"global without namespace", eg(gnp, "{action: Allow, destination: {services: {name: web}}}"), []string{"spec.egress[0].destination.services.namespace", "is required"}},
		{"global source without namespace", in(gnp, "{action: Deny, source: {services: {name: web}}}"), []string{"spec.ingress[0].source.services.namespace", "is required"}},
		{"profile without namespace", in(pro, "{action: Allow, source: {services: {name: web}}}"), []string{"spec.ingress[0].source.services.namespace"}},
	}
	for _, c := range bad {
		d, err := api.Decode([]byte(c.in))
		if err == nil {
			err = d.Resources[0].Validate()
		}
		if err == nil {
			t.Errorf("%s: accepted:\n%s", c.name, c.in)
			continue
		}
		if !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: not ErrInvalid: %v", c.name, err)
		}
		for _, m := range c.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error does not mention %q: %v", c.name, m, err)
			}
		}
	}
	good := []string{
		eg(np, "{action: Allow, destination: {services: {name: web}}}"),
		eg(np, "{action: Allow, protocol: TCP, destination: {services: {name: web, namespace: other}}}"),
		in(np, "{action: Allow, source: {services: {name: web}}}"),
		// Source ports beside a source service (Calico allows them on ingress).
		in(np, "{action: Allow, protocol: TCP, source: {services: {name: web}, ports: [80], notPorts: [81]}}"),
		// The other end may have anything.
		in(np, "{action: Allow, protocol: TCP, source: {services: {name: web}}, destination: {ports: [8080], selector: app == 'db'}}"),
		eg(gnp, "{action: Deny, destination: {services: {name: web, namespace: shop}}}"),
		in(gnp, "{action: Allow, source: {services: {name: web, namespace: shop}}}"),
		in(pro, "{action: Allow, source: {services: {name: web, namespace: shop}}}"),
	}
	for _, g := range good {
		d := mustDecode(t, g)
		if err := d.Resources[0].Validate(); err != nil {
			t.Errorf("refused: %v\n%s", err, g)
		}
	}
	// Read back unchanged.
	d := mustDecode(t, eg(np, "{action: Allow, destination: {services: {name: web, namespace: other}}}"))
	if sm := d.Resources[0].(*api.NetworkPolicy).Spec.Egress[0].Destination.Services; sm == nil || sm.Name != "web" || sm.Namespace != "other" {
		t.Errorf("services read as %+v", sm)
	}
}

// TestServiceEndpointsValidation: a record is the controllers' (their
// annotation), with addresses, TCP/UDP/SCTP and ports named when wrong.
func TestServiceEndpointsValidation(t *testing.T) {
	t.Parallel()
	if k, err := api.ParseKind("serviceendpoints"); err != nil || k != api.KindServiceEndpoints || !k.Namespaced() || k.Plural() != "serviceendpoints" {
		t.Fatalf("ParseKind(serviceendpoints) = %q, %v", k, err)
	}
	own := map[string]string{api.ControllersOwnerAnnotation: api.ControllersOwnerValue}
	good := &api.ServiceEndpoints{
		Metadata: api.ObjectMeta{Name: "web", Namespace: "shop", Annotations: own},
		Spec: api.ServiceEndpointsSpec{Subsets: []api.ServiceSubset{{
			Addresses: []string{"10.0.0.1", "fd00::1"},
			Ports:     []api.ServicePort{{Name: "http", Protocol: api.Protocol{Name: "TCP"}, Port: 80}, {Protocol: api.Protocol{Name: "SCTP"}, Port: 9}},
		}}},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good record refused: %v", err)
	}
	// By hand, as routedctl apply would read it: refused, saying whose it is.
	doc := "apiVersion: routed.io/v1\nkind: ServiceEndpoints\nmetadata: {name: web, namespace: shop}\nspec: {subsets: [{addresses: [10.0.0.1], ports: [{protocol: TCP, port: 80}]}]}\n"
	err := mustDecode(t, doc).Resources[0].Validate()
	if err == nil || !strings.Contains(err.Error(), "written by routed's controllers") {
		t.Errorf("hand-written record: %v", err)
	}
	bad := *good
	bad.Spec = api.ServiceEndpointsSpec{Subsets: []api.ServiceSubset{{
		Addresses: []string{"10.0.0.0/24"},
		Ports:     []api.ServicePort{{Protocol: api.Protocol{Name: "ICMP"}, Port: 1}, {Protocol: api.Protocol{Name: "UDP"}}},
	}}}
	err = bad.Validate()
	for _, m := range []string{"spec.subsets[0].addresses[0]", "spec.subsets[0].ports[0].protocol", "spec.subsets[0].ports[1].port"} {
		if err == nil || !strings.Contains(err.Error(), m) {
			t.Errorf("bad record: error does not mention %s: %v", m, err)
		}
	}
}
