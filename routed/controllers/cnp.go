package controllers

import (
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	npv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/routed-net/routed/pkg/api"
)

// ClusterNetworkPolicy (sigs.k8s.io/network-policy-api v1beta1) becomes
// one GlobalNetworkPolicy "kcnp.<tier>.<name>": tier Admin in kube-admin
// (before the default tier's NetworkPolicies), Baseline in kube-baseline
// (after them). Both tiers pass what their policies do not decide, so
// an endpoint a ClusterNetworkPolicy selects but whose traffic no rule
// matches goes on exactly as if the policy were not there.
const (
	CNPAdminPrefix    = "kcnp." + api.KubeAdminTierName + "."
	CNPBaselinePrefix = "kcnp." + api.KubeBaselineTierName + "."
)

// RuleNameAnnotation carries a ClusterNetworkPolicy rule's name on each
// routed rule made from it.
const RuleNameAnnotation = "routed.io/k8s-rule"

// CNPName is the routed GlobalNetworkPolicy name of ClusterNetworkPolicy
// name in tier (npv1beta1.AdminTier or BaselineTier); names too long to
// take the prefix keep their start and a hash of the whole.
func CNPName(tier npv1beta1.Tier, name string) string {
	prefix := CNPAdminPrefix
	if tier == npv1beta1.BaselineTier {
		prefix = CNPBaselinePrefix
	}
	if len(prefix)+len(name) > maxNameLen {
		return prefix + hashedName(name)
	}
	return prefix + name
}

// CNPConversion is a ClusterNetworkPolicy as a routed
// GlobalNetworkPolicy, with what could not be expressed exactly.
type CNPConversion struct {
	Policy   *api.GlobalNetworkPolicy
	Problems []string
}

// ConvertClusterNetworkPolicy converts cnp with the API's semantics:
// priority is the order in the tier (lower first; rules keep their
// written order); Accept is Allow, Deny is Deny, Pass is Pass (the rest
// of the tier is skipped); a direction without rules is left alone.
// Subjects and pod or namespace peers become selectors on the pods'
// labels and their namespaces' labels; networks become nets (one rule
// per IP family); ports become TCP, UDP or SCTP ports and ranges; a
// named port, whose protocol the API leaves to the pod, one rule for
// each of the three.
//
// What cannot be expressed is never weakened: a peer routed cannot match
// (nodes, domain names, a peer of a newer API with no field it knows) is
// left out of an Accept rule, which then accepts less; a Deny or Pass
// rule with such a peer denies its protocols from or to every peer (the
// API's "fail closed").
func ConvertClusterNetworkPolicy(cnp *npv1beta1.ClusterNetworkPolicy) CNPConversion {
	var c CNPConversion
	tier := api.KubeAdminTierName
	if cnp.Spec.Tier == npv1beta1.BaselineTier {
		tier = api.KubeBaselineTierName
	}
	order := float64(cnp.Spec.Priority)
	p := &api.GlobalNetworkPolicy{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
		Metadata: api.ObjectMeta{Name: CNPName(cnp.Spec.Tier, cnp.Name)},
		Spec:     api.GlobalNetworkPolicySpec{PolicySpec: api.PolicySpec{Tier: tier, Order: &order}},
	}
	owned(&p.Metadata, cnp.Name)
	spec := &p.Spec
	switch s := cnp.Spec.Subject; {
	case s.Namespaces != nil:
		spec.Selector = selectorFor(nil, true)
		spec.NamespaceSelector = selectorFor(s.Namespaces, false)
	case s.Pods != nil:
		spec.Selector = selectorFor(&s.Pods.PodSelector, true)
		spec.NamespaceSelector = selectorFor(&s.Pods.NamespaceSelector, false)
	default:
		c.Problems = append(c.Problems, "spec.subject names no namespaces or pods (a newer API?); the policy now applies to every pod")
		spec.Selector = selectorFor(nil, true)
	}
	if len(cnp.Spec.Ingress) > 0 {
		spec.Types = append(spec.Types, api.PolicyTypeIngress)
	}
	if len(cnp.Spec.Egress) > 0 {
		spec.Types = append(spec.Types, api.PolicyTypeEgress)
	}
	if len(spec.Types) == 0 {
		// No rules: nothing to decide. Ingress with no rules passes
		// everything on (both tiers' default action is Pass).
		spec.Types = []api.PolicyType{api.PolicyTypeIngress}
	}
	for i, r := range cnp.Spec.Ingress {
		peers := make([]cnpPeer, 0, len(r.From))
		for _, f := range r.From {
			peers = append(peers, cnpPeer{namespaces: f.Namespaces, pods: f.Pods})
		}
		field := fmt.Sprintf("spec.ingress[%d]", i)
		spec.Ingress = append(spec.Ingress, c.convertRule(p, field, true, r.Name, r.Action, peers, r.Protocols)...)
	}
	for i, r := range cnp.Spec.Egress {
		peers := make([]cnpPeer, 0, len(r.To))
		for _, t := range r.To {
			peers = append(peers, cnpPeer{namespaces: t.Namespaces, pods: t.Pods, nodes: t.Nodes, networks: t.Networks, domains: len(t.DomainNames) > 0})
		}
		field := fmt.Sprintf("spec.egress[%d]", i)
		spec.Egress = append(spec.Egress, c.convertRule(p, field, false, r.Name, r.Action, peers, r.Protocols)...)
	}
	if err := validate(p); err != nil {
		// The subject itself cannot be stored: apply to every pod and
		// keep only what denies, which is stricter than anything cnp
		// says.
		c.Problems = append(c.Problems, fmt.Sprintf("the policy cannot be expressed (%v); it now applies to every pod and denies what its Deny and Pass rules match, from or to any peer", err))
		spec.Selector, spec.NamespaceSelector = selectorFor(nil, true), ""
		spec.Ingress, spec.Egress = denyAll(spec.Ingress), denyAll(spec.Egress)
	}
	c.Policy = p
	return c
}

// cnpPeer is one ingress or egress peer; the egress-only kinds are
// empty for ingress.
type cnpPeer struct {
	namespaces *metav1.LabelSelector
	pods       *npv1beta1.NamespacedPod
	nodes      *metav1.LabelSelector
	networks   []npv1beta1.CIDR
	domains    bool
}

// entities returns the peer as rule ends, or why it cannot be one.
func (pr cnpPeer) entities() ([]api.EntityRule, string) {
	switch {
	case pr.namespaces != nil:
		return []api.EntityRule{{Selector: selectorFor(nil, true), NamespaceSelector: selectorFor(pr.namespaces, false)}}, ""
	case pr.pods != nil:
		return []api.EntityRule{{Selector: selectorFor(&pr.pods.PodSelector, true), NamespaceSelector: selectorFor(&pr.pods.NamespaceSelector, false)}}, ""
	case len(pr.networks) > 0:
		var v4, v6 []string
		for _, n := range pr.networks {
			s := maskCIDR(string(n))
			if pfx, err := netip.ParsePrefix(s); err == nil && pfx.Addr().Is6() {
				v6 = append(v6, s)
			} else {
				v4 = append(v4, s)
			}
		}
		var out []api.EntityRule
		for _, nets := range [][]string{v4, v6} {
			if len(nets) > 0 {
				out = append(out, api.EntityRule{Nets: nets})
			}
		}
		return out, ""
	case pr.nodes != nil:
		return nil, "a nodes peer (routed policy cannot match node addresses by node labels)"
	case pr.domains:
		return nil, "a domainNames peer (routed has no DNS-based policy)"
	}
	return nil, "a peer with no field routed knows (a newer API?)"
}

// protoGroup is one protocol (nil: any) and its destination ports (nil:
// any port of it).
type protoGroup struct {
	proto *api.Protocol
	ports []api.Port
}

// cnpProtocols groups a rule's protocols; ok is false when one names
// nothing routed knows.
func cnpProtocols(protos []npv1beta1.ClusterNetworkPolicyProtocol) (groups []protoGroup, ok bool) {
	if len(protos) == 0 {
		return []protoGroup{{}}, true
	}
	byProto := map[string][]api.Port{}
	add := func(name string, dp *npv1beta1.Port) bool {
		switch {
		case dp == nil:
			return false
		case dp.Range != nil:
			byProto[name] = append(byProto[name], api.PortRange(uint16(dp.Range.Start), uint16(dp.Range.End)))
		case dp.Number != 0:
			byProto[name] = append(byProto[name], api.SinglePort(uint16(dp.Number)))
		default:
			return false
		}
		return true
	}
	ok = true
	for _, pt := range protos {
		switch {
		case pt.TCP != nil:
			ok = add("TCP", pt.TCP.DestinationPort) && ok
		case pt.UDP != nil:
			ok = add("UDP", pt.UDP.DestinationPort) && ok
		case pt.SCTP != nil:
			ok = add("SCTP", pt.SCTP.DestinationPort) && ok
		case pt.DestinationNamedPort != "":
			// The pod's container port says the protocol.
			for _, name := range []string{"TCP", "UDP", "SCTP"} {
				byProto[name] = append(byProto[name], api.NamedPort(pt.DestinationNamedPort))
			}
		default:
			ok = false
		}
	}
	for _, name := range []string{"TCP", "UDP", "SCTP"} {
		proto := api.ProtocolFromName(name)
		for chunk := range slices.Chunk(simplifyPorts(byProto[name]), portsPerRule) {
			groups = append(groups, protoGroup{proto: &proto, ports: chunk})
		}
	}
	return groups, ok
}

// convertRule turns one ClusterNetworkPolicy rule into routed rules of
// one action, each checked as the datastore would; see
// ConvertClusterNetworkPolicy for what happens to what cannot be held.
func (c *CNPConversion) convertRule(p *api.GlobalNetworkPolicy, field string, ingress bool, name string,
	action npv1beta1.ClusterNetworkPolicyRuleAction, peers []cnpPeer, protos []npv1beta1.ClusterNetworkPolicyProtocol) []api.Rule {
	var act api.Action
	switch action {
	case npv1beta1.ClusterNetworkPolicyRuleActionAccept:
		act = api.ActionAllow
	case npv1beta1.ClusterNetworkPolicyRuleActionDeny:
		act = api.ActionDeny
	case npv1beta1.ClusterNetworkPolicyRuleActionPass:
		act = api.ActionPass
	default:
		c.Problems = append(c.Problems, fmt.Sprintf("%s: unknown action %q; the rule is left out", field, action))
		return nil
	}
	var meta *api.RuleMetadata
	if name != "" {
		meta = &api.RuleMetadata{Annotations: map[string]string{RuleNameAnnotation: name}}
	}
	groups, protosOK := cnpProtocols(protos)
	var ends []api.EntityRule
	var unknown []string
	for _, pr := range peers {
		es, why := pr.entities()
		if why != "" {
			unknown = append(unknown, why)
			continue
		}
		ends = append(ends, es...)
	}
	build := func(act api.Action, ends []api.EntityRule, groups []protoGroup) []api.Rule {
		var out []api.Rule
		for _, g := range groups {
			for _, e := range ends {
				r := api.Rule{Action: act, Protocol: g.proto, Metadata: meta}
				if ingress {
					r.Source = e
					r.Destination.Ports = slices.Clone(g.ports)
				} else {
					e.Ports = slices.Clone(g.ports)
					r.Destination = e
				}
				out = append(out, r)
			}
		}
		return out
	}
	// failClosed: an Accept rule accepts less, a Deny or Pass rule
	// denies its protocols (or everything, when they are unknown too)
	// for every peer.
	failClosed := func(why string) []api.Rule {
		if act == api.ActionAllow {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: %s cannot be enforced; the Accept rule is left out for it, so it accepts less", field, why))
			return nil
		}
		c.Problems = append(c.Problems, fmt.Sprintf("%s: %s cannot be enforced; the %s rule now denies its traffic from or to any peer", field, why, action))
		if !protosOK {
			groups = []protoGroup{{}}
		}
		return build(api.ActionDeny, []api.EntityRule{{}}, groups)
	}
	if !protosOK {
		if act == api.ActionAllow {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: a protocol with no field routed knows (a newer API?); the Accept rule is left out", field))
			return nil
		}
		return failClosed("a protocol with no field routed knows (a newer API?)")
	}
	if len(unknown) > 0 {
		if act != api.ActionAllow {
			return failClosed(unknown[0])
		}
		for _, why := range unknown {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: %s cannot be enforced; that peer is left out of the Accept rule, so it accepts less", field, why))
		}
	}
	rules := build(act, ends, groups)
	probe := *p
	probe.Spec.PolicySpec = api.PolicySpec{Tier: p.Spec.Tier, Order: p.Spec.Order, Types: p.Spec.Types}
	if ingress {
		probe.Spec.Ingress = rules
	} else {
		probe.Spec.Egress = rules
	}
	if err := validate(&probe); err != nil {
		return failClosed(fmt.Sprintf("a rule routed refuses (%v)", err))
	}
	return rules
}

// denyAll keeps rules' Deny and Pass matches as Deny from or to any
// peer.
func denyAll(rules []api.Rule) []api.Rule {
	var out []api.Rule
	for _, r := range rules {
		if r.Action == api.ActionAllow {
			continue
		}
		out = append(out, api.Rule{Action: api.ActionDeny, Protocol: r.Protocol, Metadata: r.Metadata,
			Destination: api.EntityRule{Ports: r.Destination.Ports}})
	}
	return out
}
