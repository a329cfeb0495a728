package policy

import (
	"fmt"
	"math"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// cpolicy is a compiled NetworkPolicy or GlobalNetworkPolicy.
type cpolicy struct {
	key   string // "gnp:<name>" or "np:<namespace>/<name>"
	name  string // for ties: tieName's
	tier  string
	order float64 // +Inf when not given
	sel   *matcher
	// ingress/egress: nil when the policy does not apply in that direction.
	ingress, egress []*rule
	hasIn, hasOut   bool
	host            hostFlags // a GlobalNetworkPolicy's host endpoint fields
	// workloadsOnly keeps it off host endpoints (the deny for an
	// unreadable record: SetUnreadable).
	workloadsOnly bool
	// hostsOnly keeps it off workload endpoints (the deny for an
	// unreadable HostEndpoint: SetUnreadableHost).
	hostsOnly bool

	// Local endpoints it selects (keys); active while not empty.
	selected map[string]bool
}

// PolicyKey is how the calculator names a policy: "gnp:<name>" for a
// GlobalNetworkPolicy, "np:<namespace>/<name>" for a NetworkPolicy.
func PolicyKey(p api.Policy) string {
	if p.GetKind() == api.KindNetworkPolicy {
		return "np:" + p.Meta().Namespace + "/" + p.Meta().Name
	}
	return "gnp:" + p.Meta().Name
}

// tieName orders policies of one tier and order as Calico 3.32 and later
// do (felix/calc PolKVLess): by "<name>/<namespace>/<kind>", so name
// first, then namespace (none for a GlobalNetworkPolicy), then kind
// ("GlobalNetworkPolicy" before "NetworkPolicy"). Earlier Calico
// compared its stored key names, which differ from release to release.
func tieName(name, ns, kind string) string { return name + "/" + ns + "/" + kind }

// tieNameOf is tieName of p as Calico keys it: a NetworkPolicy the
// controllers wrote for a Kubernetes NetworkPolicy is Calico's
// KubernetesNetworkPolicy, keyed by the Kubernetes name (without
// "knp.default.", and whole where the stored name had to be hashed).
// A NetworkPolicy only named "knp.default.<x>" (Calico accepts such
// names) keeps its name and kind, as in Calico.
func tieNameOf(p api.Policy, ns string) string {
	name, kind := p.Meta().Name, string(p.GetKind())
	m := p.Meta()
	if kind == string(api.KindNetworkPolicy) && strings.HasPrefix(name, api.KubernetesNetworkPolicyPrefix) &&
		m.Annotations[api.ControllersOwnerAnnotation] == api.ControllersOwnerValue {
		name, kind = strings.TrimPrefix(name, api.KubernetesNetworkPolicyPrefix), api.KindKubernetesNetworkPolicy
		if srcNS, srcName, ok := strings.Cut(m.Annotations[api.KubernetesSourceAnnotation], "/"); ok && srcNS == ns && srcName != "" {
			name = srcName
		}
	}
	return tieName(name, ns, kind)
}

func compilePolicy(p api.Policy) (*cpolicy, error) {
	spec := p.Policy()
	ns := ""
	nsSel := ""
	if g, ok := p.(*api.GlobalNetworkPolicy); ok {
		nsSel = g.Spec.NamespaceSelector
	} else {
		ns = p.Meta().Namespace
		if ns == "" {
			return nil, fieldErr("metadata.namespace", -1, "", "is required for a NetworkPolicy")
		}
	}
	cp := &cpolicy{key: PolicyKey(p), name: tieNameOf(p, ns), tier: spec.Tier, order: math.Inf(1), selected: map[string]bool{}, host: hostFlagsOf(p)}
	if cp.tier == "" {
		cp.tier = api.DefaultTierName
	}
	if spec.Order != nil {
		cp.order = *spec.Order
	}
	var err error
	if cp.sel, err = newMatcher("spec", spec.Selector, nsSel, ns, nil, spec.ServiceAccountSelector); err != nil {
		return nil, err
	}
	types := spec.Types
	if len(types) == 0 { // Calico's defaults, if the caller did not apply them
		types = []api.PolicyType{api.PolicyTypeIngress}
		if len(spec.Egress) > 0 {
			types = []api.PolicyType{api.PolicyTypeEgress}
			if len(spec.Ingress) > 0 {
				types = append(types, api.PolicyTypeIngress)
			}
		}
	}
	for i, t := range types {
		switch t {
		case api.PolicyTypeIngress:
			cp.hasIn = true
		case api.PolicyTypeEgress:
			cp.hasOut = true
		default:
			return nil, fieldErr("spec.types", i, t, "must be Ingress or Egress")
		}
	}
	if cp.ingress, err = compileRules("spec.ingress", spec.Ingress, ns); err != nil {
		return nil, err
	}
	if cp.egress, err = compileRules("spec.egress", spec.Egress, ns); err != nil {
		return nil, err
	}
	return cp, nil
}

func compileRules(field string, rs []api.Rule, ns string) ([]*rule, error) {
	out := make([]*rule, 0, len(rs))
	for i := range rs {
		r, err := compileRule(fmt.Sprintf("%s[%d]", field, i), &rs[i], ns)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// chain names the policy's chain for a direction; long keys are hashed
// (nftables names stop at 255 bytes).
func (p *cpolicy) chain(ingress bool) string {
	prefix := "po-"
	if ingress {
		prefix = "pi-"
	}
	if len(p.key) > 200 {
		return hashName(prefix, p.key)
	}
	return prefix + p.key
}

func (p *cpolicy) rules(ingress bool) []*rule {
	if ingress {
		return p.ingress
	}
	return p.egress
}

func (p *cpolicy) applies(ingress bool) bool {
	if ingress {
		return p.hasIn
	}
	return p.hasOut
}

// sets lists the sets the policy's rules need, in the directions it has.
func (p *cpolicy) sets() []setSpec {
	var out []setSpec
	for _, in := range []bool{true, false} {
		if !p.applies(in) {
			continue
		}
		for _, r := range p.rules(in) {
			out = append(out, r.sets()...)
		}
	}
	return out
}

// tierInfo is a tier's order and whether its end drops.
type tierInfo struct {
	order float64
	pass  bool // defaultAction Pass: a tier's end passes to the next
}

func compileProfile(p *api.Profile) (*profile, error) {
	cp := &profile{name: p.Metadata.Name, labels: packProfileLabels(p.Spec.LabelsToApply)}
	var err error
	if cp.ingress, err = compileRules("spec.ingress", p.Spec.Ingress, ""); err != nil {
		return nil, err
	}
	if cp.egress, err = compileRules("spec.egress", p.Spec.Egress, ""); err != nil {
		return nil, err
	}
	return cp, nil
}

func (p *profile) chain(ingress bool) string {
	if ingress {
		return hashIfLong("pri-", p.name)
	}
	return hashIfLong("pro-", p.name)
}

func hashIfLong(prefix, name string) string {
	if len(name) > 200 {
		return hashName(prefix, name)
	}
	return prefix + name
}

func (p *profile) sets() []setSpec {
	var out []setSpec
	for _, rs := range [][]*rule{p.ingress, p.egress} {
		for _, r := range rs {
			out = append(out, r.sets()...)
		}
	}
	return out
}
