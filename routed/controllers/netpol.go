package controllers

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/routed-net/routed/pkg/api"
)

// portsPerRule is how many ports one rule may list (pkg/api refuses
// more); longer lists are split over several rules, which allow the
// same traffic.
const portsPerRule = 50

// PolicyName is the routed name of Kubernetes NetworkPolicy name:
// "knp.default.<name>", or for names too long to take the prefix, their
// start and a hash of the whole (SourceAnnotation keeps the real name).
func PolicyName(name string) string {
	if len(PolicyNamePrefix)+len(name) > maxNameLen {
		return PolicyNamePrefix + hashedName(name)
	}
	return PolicyNamePrefix + name
}

// maxNameLen is the longest name pkg/api stores.
const maxNameLen = 253

// Conversion is a Kubernetes NetworkPolicy as a routed NetworkPolicy,
// with what could not be expressed exactly. Problems are never silently
// weakened: an allow rule the model cannot hold is left out (it allows
// less), and a policy that cannot be held at all becomes one that allows
// nothing in its directions for every pod of its namespace.
type Conversion struct {
	Policy   *api.NetworkPolicy
	Problems []string
}

// ConvertNetworkPolicy converts np with Kubernetes' semantics, as Calico
// does: order 1000 in the default tier; the pod selector plus the k8s
// orchestrator label; policyTypes as given, else Ingress (the API server
// adds Egress when there are egress rules); per rule, one Allow per peer
// and protocol (no peers: any peer; no ports: any protocol and port; a
// port without a number: every port of its protocol, TCP when none is
// given); a peer's pod selector alone means the policy's namespace, a
// namespace selector picks namespaces by their labels ({} is all), an
// ipBlock is nets less its except list; named ports and endPort ranges
// are kept as ports (an egress rule's named ports, when its peer picks
// no pods, in a rule of their own that looks them up in every
// namespace).
func ConvertNetworkPolicy(np *networkingv1.NetworkPolicy) Conversion {
	var c Conversion
	order := PolicyOrder
	p := &api.NetworkPolicy{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNetworkPolicy},
		Metadata: api.ObjectMeta{Name: PolicyName(np.Name), Namespace: np.Namespace},
		Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{
			Tier:     api.DefaultTierName,
			Order:    &order,
			Selector: selectorFor(&np.Spec.PodSelector, true),
		}},
	}
	owned(&p.Metadata, np.Namespace+"/"+np.Name)
	spec := &p.Spec.PolicySpec
	var ingress, egress bool
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	if !ingress && !egress {
		ingress = true
	}
	if ingress {
		spec.Types = append(spec.Types, api.PolicyTypeIngress)
	}
	if egress {
		spec.Types = append(spec.Types, api.PolicyTypeEgress)
	}
	if ingress {
		for i, r := range np.Spec.Ingress {
			spec.Ingress = append(spec.Ingress, c.keepValid(p, fmt.Sprintf("spec.ingress[%d]", i), true, convertRule(r.From, r.Ports, true))...)
		}
	}
	if egress {
		for i, r := range np.Spec.Egress {
			spec.Egress = append(spec.Egress, c.keepValid(p, fmt.Sprintf("spec.egress[%d]", i), false, convertRule(r.To, r.Ports, false))...)
		}
	}
	if err := validate(p); err != nil {
		// What is left cannot be stored as it is (its name or selector):
		// fall back to allowing nothing in its directions for every pod
		// of the namespace, which is stricter than anything np says.
		c.Problems = append(c.Problems, fmt.Sprintf("the policy cannot be expressed (%v); it now selects every pod of namespace %s and allows nothing in %v", err, np.Namespace, spec.Types))
		spec.Selector = selectorFor(nil, true)
		spec.Ingress, spec.Egress = nil, nil
	}
	c.Policy = p
	return c
}

// keepValid returns the rules that pkg/api accepts in p's direction and
// records a problem for each one left out.
func (c *Conversion) keepValid(p *api.NetworkPolicy, field string, ingress bool, rules []api.Rule) []api.Rule {
	var out []api.Rule
	for _, r := range rules {
		probe := *p
		probe.Spec.PolicySpec = api.PolicySpec{Tier: p.Spec.Tier, Order: p.Spec.Order, Types: p.Spec.Types}
		if ingress {
			probe.Spec.Ingress = []api.Rule{r}
		} else {
			probe.Spec.Egress = []api.Rule{r}
		}
		if err := validate(&probe); err != nil {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: an allow rule cannot be expressed and is left out, so it allows nothing: %v", field, err))
			continue
		}
		out = append(out, r)
	}
	return out
}

// validate checks a copy of p (a NetworkPolicy or GlobalNetworkPolicy)
// as the datastore would on write.
func validate[T any, P interface {
	*T
	api.Policy
}](p P) error {
	cp := P(new(T))
	*cp = *p
	spec := cp.Policy()
	spec.Ingress, spec.Egress = slices.Clone(spec.Ingress), slices.Clone(spec.Egress)
	api.SetDefaults(cp)
	return cp.Validate()
}

// convertRule turns one Kubernetes rule into routed Allow rules.
func convertRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, ingress bool) []api.Rule {
	// Ports grouped by protocol; a nil list means every port of it, and
	// the "" protocol (no ports at all) means any traffic.
	byProto := map[string][]api.Port{}
	allPorts := map[string]bool{}
	if len(ports) == 0 {
		allPorts[""] = true
	}
	for _, pt := range ports {
		proto := string(corev1.ProtocolTCP)
		if pt.Protocol != nil {
			proto = string(*pt.Protocol)
		}
		if pt.Port == nil {
			allPorts[proto] = true
			continue
		}
		var port api.Port
		switch {
		case pt.Port.Type == intstr.String:
			port = api.NamedPort(pt.Port.StrVal)
		case pt.EndPort != nil:
			port = api.PortRange(uint16(pt.Port.IntVal), uint16(*pt.EndPort))
		default:
			port = api.SinglePort(uint16(pt.Port.IntVal))
		}
		byProto[proto] = append(byProto[proto], port)
	}
	type group struct {
		proto *api.Protocol
		ports []api.Port
	}
	var groups []group
	if allPorts[""] {
		groups = []group{{}}
	} else {
		protos := map[string]bool{}
		for p := range byProto {
			protos[p] = true
		}
		for p := range allPorts {
			protos[p] = true
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for p := range protos {
				if !yield(p) {
					return
				}
			}
		}) {
			proto := api.ProtocolFromName(name)
			if allPorts[name] {
				groups = append(groups, group{proto: &proto})
				continue
			}
			for chunk := range slices.Chunk(simplifyPorts(byProto[name]), portsPerRule) {
				groups = append(groups, group{proto: &proto, ports: chunk})
			}
		}
	}
	peerList := make([]*networkingv1.NetworkPolicyPeer, 0, len(peers))
	for i := range peers {
		peerList = append(peerList, &peers[i])
	}
	if len(peerList) == 0 {
		peerList = []*networkingv1.NetworkPolicyPeer{nil}
	}
	var rules []api.Rule
	for _, g := range groups {
		for _, peer := range peerList {
			r := api.Rule{Action: api.ActionAllow, Protocol: g.proto}
			e := peerEntity(peer)
			if ingress {
				r.Source = e
				r.Destination.Ports = slices.Clone(g.ports)
				rules = append(rules, r)
				continue
			}
			nums, names := splitNamed(g.ports)
			if len(names) == 0 || e.Selector != "" || e.NamespaceSelector != "" {
				e.Ports = slices.Clone(g.ports)
				r.Destination = e
				rules = append(rules, r)
				continue
			}
			// A destination's named port is the port its pod gives that
			// name, in any namespace when the peer names none (no peer,
			// or an ipBlock). A rule without a namespace selector would
			// look in the policy's namespace only, so the names get a
			// rule of their own that picks pods in every namespace; the
			// numbers stay with any destination.
			if len(nums) > 0 {
				n := r
				n.Destination = e
				n.Destination.Ports = nums
				rules = append(rules, n)
			}
			e.Selector = selectorFor(nil, true)
			e.NamespaceSelector = "all()"
			e.Ports = names
			r.Destination = e
			rules = append(rules, r)
		}
	}
	return rules
}

// splitNamed returns ports' numbers and ranges, and its names.
func splitNamed(ports []api.Port) (nums, names []api.Port) {
	for _, p := range ports {
		if p.PortName != "" {
			names = append(names, p)
		} else {
			nums = append(nums, p)
		}
	}
	return nums, names
}

// peerEntity is one peer as the far end of a rule.
func peerEntity(peer *networkingv1.NetworkPolicyPeer) api.EntityRule {
	var e api.EntityRule
	if peer == nil {
		return e
	}
	if b := peer.IPBlock; b != nil {
		e.Nets = []string{maskCIDR(b.CIDR)}
		for _, x := range b.Except {
			e.NotNets = append(e.NotNets, maskCIDR(x))
		}
		return e
	}
	e.Selector = selectorFor(peer.PodSelector, true)
	e.NamespaceSelector = selectorFor(peer.NamespaceSelector, false)
	return e
}

// maskCIDR writes a CIDR with its host bits cleared, as the network it
// names; what does not parse is kept for validation to report.
func maskCIDR(s string) string {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return s
	}
	return p.Masked().String()
}
