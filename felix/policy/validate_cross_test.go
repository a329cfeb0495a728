package policy_test

import (
	"fmt"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// Whatever pkg/api's Validate accepts (what routedctl apply and the
// controllers let into the datastore) felix must compile: a policy
// felix refuses is a policy not enforced as written (now a deny of its
// endpoints, before a pass to their profiles). The security review
// found named ports without a protocol accepted by one and refused by
// the other; this walks the rule fields' combinations in
// NetworkPolicies, GlobalNetworkPolicies and Profiles.
func TestValidatedRulesCompile(t *testing.T) {
	ptr := func(i int) *int { return &i }
	proto := func(s string) *api.Protocol { p := api.ProtocolFromName(s); return &p }
	num := api.ProtocolFromNumber(47)
	protos := []*api.Protocol{nil, proto("TCP"), proto("UDP"), proto("SCTP"), proto("UDPLite"), proto("ICMP"), proto("ICMPv6"), &num}
	portLists := [][]api.Port{nil, {api.SinglePort(80)}, {api.PortRange(80, 90)}, {api.NamedPort("http")},
		{api.SinglePort(80), api.NamedPort("http")}, {api.NamedPort("http"), api.NamedPort("dns")}}
	notPortLists := [][]api.Port{nil, {api.SinglePort(443)}, {api.NamedPort("metrics")}}
	peers := []api.EntityRule{{}, {Selector: "app == 'a'"}, {NotSelector: "app == 'a'"},
		{NamespaceSelector: "env == 'dev'"}, {NamespaceSelector: "all()", NotSelector: "app == 'a'"},
		{Selector: "app == 'a'", NotSelector: "team == 'x'"},
		{ServiceAccounts: &api.ServiceAccountMatch{Names: []string{"sa-a"}}},
		{ServiceAccounts: &api.ServiceAccountMatch{Selector: "role == 'x'"}, NotSelector: "app == 'a'"},
		{Services: &api.ServiceMatch{Name: "web", Namespace: "prod"}},
		{Nets: []string{"10.0.0.0/8"}}, {Nets: []string{"fd00::/8"}}, {NotNets: []string{"10.1.0.0/16"}},
		{NotSelector: "app == 'a'", Nets: []string{"192.0.2.0/24"}, NotNets: []string{"192.0.2.1"}}}

	var rules []api.Rule
	// The rule's own fields.
	for _, a := range []api.Action{api.ActionAllow, api.ActionDeny, api.ActionLog, api.ActionPass} {
		for _, v := range []*int{nil, ptr(4), ptr(6)} {
			for _, p := range protos {
				for _, np := range []*api.Protocol{nil, proto("UDP"), proto("ICMP")} {
					for _, icmp := range []*api.ICMPFields{nil, {Type: ptr(8)}, {Type: ptr(8), Code: ptr(0)}} {
						rules = append(rules, api.Rule{Action: a, IPVersion: v, Protocol: p, NotProtocol: np, ICMP: icmp, NotICMP: icmp})
					}
				}
			}
		}
	}
	// Each side's fields, under each protocol.
	for _, p := range protos {
		for _, ports := range portLists {
			for _, notPorts := range notPortLists {
				for _, peer := range peers {
					for _, dst := range []bool{false, true} {
						e := peer
						e.Ports, e.NotPorts = ports, notPorts
						r := api.Rule{Action: api.ActionAllow, Protocol: p}
						if dst {
							r.Destination = e
						} else {
							r.Source = e
						}
						rules = append(rules, r)
					}
				}
			}
		}
	}

	accepted := map[api.Kind]int{}
	for i, r := range rules {
		for _, res := range asResources(r) {
			if res.Validate() != nil {
				continue
			}
			accepted[res.GetKind()]++
			if err := policy.NewModel().SetResource(res); err != nil {
				t.Errorf("rule %d in a %s: pkg/api accepts it, felix refuses it: %v\nrule: %+v", i, res.GetKind(), err, r)
			}
		}
	}
	for _, k := range []api.Kind{api.KindNetworkPolicy, api.KindGlobalNetworkPolicy, api.KindProfile} {
		// Ingress and egress placements: a rule validates in at least
		// one unless its fields conflict.
		if accepted[k] < len(rules)/4 {
			t.Errorf("only %d of %d rule placements in a %s validated: the walk checks too little", accepted[k], 2*len(rules), k)
		}
	}
	t.Logf("%d rules; placements accepted by pkg/api, all compiled by felix: %v", len(rules), accepted)
}

// asResources places one rule in a NetworkPolicy, a
// GlobalNetworkPolicy and a Profile, ingress and egress.
func asResources(r api.Rule) []api.Resource {
	spec := api.PolicySpec{Tier: api.DefaultTierName, Selector: "app == 'b'", Types: []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}}
	var out []api.Resource
	for _, ingress := range []bool{true, false} {
		s := spec
		if ingress {
			s.Ingress = []api.Rule{r}
		} else {
			s.Egress = []api.Rule{r}
		}
		name := fmt.Sprintf("x-%t", ingress)
		out = append(out,
			&api.NetworkPolicy{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNetworkPolicy},
				Metadata: api.ObjectMeta{Name: name, Namespace: "prod"}, Spec: api.NetworkPolicySpec{PolicySpec: s}},
			&api.GlobalNetworkPolicy{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
				Metadata: api.ObjectMeta{Name: name}, Spec: api.GlobalNetworkPolicySpec{PolicySpec: s}},
			&api.Profile{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
				Metadata: api.ObjectMeta{Name: name}, Spec: api.ProfileSpec{Ingress: s.Ingress, Egress: s.Egress}})
	}
	return out
}
