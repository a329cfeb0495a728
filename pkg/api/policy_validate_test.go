package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestPolicyValidation: every bad input is refused with an error naming
// the field and what it accepts; the good neighbours of each are taken.
func TestPolicyValidation(t *testing.T) {
	t.Parallel()
	const gnp = "apiVersion: routed.io/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: p}\nspec:\n"
	rule := func(r string) string { return gnp + "  ingress:\n  - " + r + "\n" }
	bad := []struct {
		name, in string
		mention  []string
	}{
		{"bad selector", gnp + "  selector: app = 'web'\n", []string{"spec.selector"}},
		{"bad rule selector", rule("{action: Allow, source: {selector: 'has(app'}}"), []string{"spec.ingress[0].source.selector"}},
		{"bad namespace selector", rule("{action: Allow, destination: {namespaceSelector: 'global() && a == \"b\"'}}"), []string{"spec.ingress[0].destination.namespaceSelector", "global()"}},
		{"global namespace selector", rule("{action: Allow, source: {namespaceSelector: global(), selector: role == 'db'}}"), []string{"spec.ingress[0].source.namespaceSelector", "not supported"}},
		{"bad service account selector", rule("{action: Allow, source: {serviceAccounts: {selector: '=='}}}"), []string{"spec.ingress[0].source.serviceAccounts.selector"}},
		{"missing action", rule("{protocol: TCP}"), []string{"spec.ingress[0].action", "Allow, Deny, Log or Pass"}},
		{"unknown action", rule("{action: Accept}"), []string{"spec.ingress[0].action", "Accept"}},
		{"port out of range", rule("{action: Allow, protocol: TCP, destination: {ports: [70000]}}"), []string{"spec.ingress[0].destination.ports[0]", "70000", "1-65535"}},
		{"port zero", rule("{action: Allow, protocol: TCP, destination: {ports: [0]}}"), []string{"spec.ingress[0].destination.ports[0]"}},
		{"reversed range", rule("{action: Allow, protocol: TCP, destination: {ports: ['90:80']}}"), []string{"spec.ingress[0].destination.ports[0]", "90:80"}},
		{"range end out of range", rule("{action: Allow, protocol: UDP, source: {notPorts: ['1:65536']}}"), []string{"spec.ingress[0].source.notPorts[0]"}},
		{"bad port name", rule("{action: Allow, protocol: TCP, destination: {ports: ['a b']}}"), []string{"spec.ingress[0].destination.ports[0]"}},
		{"numbered port without protocol", rule("{action: Allow, destination: {ports: [80]}}"), []string{"spec.ingress[0].destination.ports", "TCP, UDP or SCTP"}},
		{"port with ICMP", rule("{action: Allow, protocol: ICMP, destination: {ports: [http]}}"), []string{"spec.ingress[0].destination.ports", "protocol is ICMP"}},
		{"bad protocol name", rule("{action: Allow, protocol: tcpp}"), []string{"spec.ingress[0].protocol", "tcpp"}},
		{"protocol number 0", rule("{action: Allow, notProtocol: 0}"), []string{"spec.ingress[0].notProtocol", "1-255"}},
		{"protocol number 256", rule("{action: Allow, protocol: 256}"), []string{"spec.ingress[0].protocol", "1-255"}},
		{"icmp on TCP", rule("{action: Allow, protocol: TCP, icmp: {type: 8}}"), []string{"spec.ingress[0].icmp", "ICMP or ICMPv6", "protocol is TCP"}},
		{"icmp without protocol", rule("{action: Allow, notICMP: {type: 8}}"), []string{"spec.ingress[0].notICMP", "unset"}},
		{"icmp code without type", rule("{action: Allow, protocol: ICMP, icmp: {code: 0}}"), []string{"spec.ingress[0].icmp.code", "needs a type"}},
		{"icmp type out of range", rule("{action: Allow, protocol: ICMP, icmp: {type: 255}}"), []string{"spec.ingress[0].icmp.type", "0-254"}},
		{"ICMPv6 on ipVersion 4", rule("{action: Allow, protocol: ICMPv6, ipVersion: 4}"), []string{"spec.ingress[0].protocol", "ipVersion 4"}},
		{"bad ipVersion", rule("{action: Allow, ipVersion: 5}"), []string{"spec.ingress[0].ipVersion", "4 or 6"}},
		{"ipVersion mismatching nets", rule("{action: Allow, ipVersion: 6, source: {nets: [10.0.0.0/8]}}"), []string{"spec.ingress[0].source.nets[0]", "IPv4", "ipVersion is 6"}},
		{"mixed families", rule("{action: Allow, source: {nets: [10.0.0.0/8]}, destination: {notNets: ['2001:db8::/32']}}"), []string{"spec.ingress[0].destination.notNets[0]", "one IP version"}},
		{"ICMP with IPv6 nets", rule("{action: Allow, protocol: ICMP, source: {nets: ['2001:db8::/32']}}"), []string{"spec.ingress[0].source.nets[0]"}},
		{"bad net", rule("{action: Allow, source: {nets: [10.0.0.0/33]}}"), []string{"spec.ingress[0].source.nets[0]", "not a CIDR"}},
		{"notNets everything", rule("{action: Allow, source: {notNets: [0.0.0.0/0]}}"), []string{"spec.ingress[0].source.notNets[0]", "match nothing"}},
		{"bad type", gnp + "  types: [Ingress, Forward]\n", []string{"spec.types[1]", "Ingress or Egress"}},
		{"type twice", gnp + "  types: [Egress, Egress]\n", []string{"spec.types[1]", "twice"}},
		{"tier with a dot", gnp + "  tier: a.b\n", []string{"spec.tier"}},
		{"bad gnp namespace selector", gnp + "  namespaceSelector: '&&'\n", []string{"spec.namespaceSelector"}},
		{"bad policy name", "apiVersion: routed.io/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: a.b.c}\n", []string{"metadata.name", "a.b.c"}},
		{"bad namespace", "apiVersion: routed.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: a.b}\n", []string{"metadata.namespace", "no dots"}},
		{"bad set net", "apiVersion: routed.io/v1\nkind: GlobalNetworkSet\nmetadata: {name: s}\nspec: {nets: [bogus]}\n", []string{"spec.nets[0]", "bogus"}},
		{"tier default action", "apiVersion: routed.io/v1\nkind: Tier\nmetadata: {name: t}\nspec: {defaultAction: Allow}\n", []string{"spec.defaultAction", "Deny or Pass"}},
		{"well-known tier order", "apiVersion: routed.io/v1\nkind: Tier\nmetadata: {name: default}\nspec: {order: 5}\n", []string{"spec.order", "fixed at 1e+06"}},
		{"well-known tier action", "apiVersion: routed.io/v1\nkind: Tier\nmetadata: {name: kube-admin}\nspec: {defaultAction: Deny}\n", []string{"spec.defaultAction", "fixed at Pass"}},
		{"tier name with dot", "apiVersion: routed.io/v1\nkind: Tier\nmetadata: {name: a.b}\n", []string{"metadata.name", "tier name"}},
		{"profile rule", "apiVersion: routed.io/v1\nkind: Profile\nmetadata: {name: kns.a}\nspec: {egress: [{action: Drop}]}\n", []string{"spec.egress[0].action"}},
		{"profile labels", "apiVersion: routed.io/v1\nkind: Profile\nmetadata: {name: kns.a}\nspec: {labelsToApply: {'a b': c}}\n", []string{"spec.labelsToApply"}},
	}
	for _, c := range bad {
		d, err := api.Decode([]byte(c.in))
		if err == nil {
			err = d.Resources[0].Validate()
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, api.ErrInvalid) && !errors.Is(err, api.ErrDecode) {
			t.Errorf("%s: error is neither ErrInvalid nor ErrDecode: %v", c.name, err)
		}
		for _, m := range c.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error does not mention %q: %v", c.name, m, err)
			}
		}
	}

	good := []string{
		rule("{action: Allow, destination: {ports: [http]}}"), // named ports carry their protocol
		rule("{action: Allow, protocol: 132, destination: {ports: ['1:65535']}}"),
		rule("{action: Deny, protocol: ICMPv6, icmp: {type: 128, code: 0}, ipVersion: 6}"),
		rule("{action: Allow, source: {nets: [10.0.0.1, 10.1.0.0/16]}}"),
		rule("{action: Log}"),
		"apiVersion: routed.io/v1\nkind: Tier\nmetadata: {name: default}\n",
		"apiVersion: routed.io/v1\nkind: NetworkPolicy\nmetadata: {name: knp.default.allow-dns, namespace: kube-system}\n",
		"apiVersion: routed.io/v1\nkind: NetworkPolicy\nmetadata: {name: security.allow, namespace: a}\nspec: {tier: security}\n",
	}
	for _, in := range good {
		d := mustDecode(t, in)
		if err := d.Resources[0].Validate(); err != nil {
			t.Errorf("refused: %v\n%s", err, in)
		}
	}
	// A bare address is stored as its /32, as Calico reads it.
	d := mustDecode(t, rule("{action: Allow, source: {nets: [10.0.0.1]}}"))
	if n := d.Resources[0].(*api.GlobalNetworkPolicy).Spec.Ingress[0].Source.Nets[0]; n != "10.0.0.1/32" {
		t.Errorf("bare address stored as %q", n)
	}
}
