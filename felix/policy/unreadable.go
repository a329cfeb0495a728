package policy

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// UnreadableTier is the tier of the policies that stand for records the
// datastore holds but felix cannot decode (SetUnreadable). It sorts
// before every tier; no Tier can have its name (a colon is not allowed
// in one).
const UnreadableTier = "routed:unreadable"

// UnreadableKinds are the policy kinds whose stored records that do not
// decode felix denies for (SetUnreadable) instead of leaving them out:
// left out, a policy or a tier that isolates, or a set or a profile that
// a Deny rule names, would let through what it stops. Workload and host
// endpoints are not among them: each gets a deny of its own, of the
// traffic of a WorkloadEndpoint's addresses (SetUnreadableEndpoint), on
// a HostEndpoint's interface (SetUnreadableHost).
var UnreadableKinds = []api.Kind{api.KindTier, api.KindNetworkPolicy, api.KindGlobalNetworkPolicy,
	api.KindProfile, api.KindNetworkSet, api.KindGlobalNetworkSet, api.KindServiceEndpoints}

// UnreadableKey is the policy key of the deny standing for the record
// of kind k named name (its datastore name).
func UnreadableKey(k api.Kind, name string) string {
	return "unreadable:" + string(k) + ":" + name
}

// SetUnreadable fails closed for a record of a policy kind that is
// stored but does not decode (corrupt, or written by something that is
// not routed), or that felix refused and has nothing of in force: what
// it says is unknown, so it may deny or isolate anything it could.
// Until the record is set again or deleted, a policy in UnreadableTier,
// before every tier, denies all traffic in both directions of:
//   - a NetworkPolicy's namespace's workload endpoints (a NetworkPolicy
//     selects in its namespace alone);
//   - every workload endpoint and this node's host endpoints (normal
//     and forward contexts), for the other kinds (a global policy, a
//     tier, a profile, whose labels other namespaces' selectors see,
//     a network set, a Service's endpoints: their reach is not
//     bounded). Host endpoints keep established flows, their failsafe
//     ports and tunnel peers, which their chains take first.
//
// The caller removes the record's previous version first (it is not
// the record's now). why is the reason, for the log and Unreadable.
func (m *Manager) SetUnreadable(k api.Kind, name string, why error) error {
	return m.calc.setUnreadable(k, name, why)
}

// ClearUnreadable ends SetUnreadable's deny for a record (set again or
// deleted) and reports whether there was one.
func (m *Manager) ClearUnreadable(k api.Kind, name string) bool {
	return m.calc.clearUnreadable(k, name)
}

// UnreadableRecord is a record felix denies for (SetUnreadable).
type UnreadableRecord struct {
	Kind api.Kind `json:"kind"`
	Name string   `json:"name"`
	// Scope is whose traffic the deny stops: "namespace <ns>" or "all
	// workload endpoints".
	Scope string `json:"scope"`
	Error string `json:"error"`
	// known are the addresses of the last readable version of an
	// unreadable WorkloadEndpoint (SetUnreadableEndpoint).
	known []netip.Prefix
}

// Unreadable lists the records felix denies for, by kind and name.
func (m *Manager) Unreadable() []UnreadableRecord { return m.calc.unreadableList() }

// SetUnreadable is Manager.SetUnreadable for a model (NewModel): explain
// evaluates flows with the denies felix installs.
func (c *Calc) SetUnreadable(k api.Kind, name string, why error) error {
	return c.setUnreadable(k, name, why)
}

// ClearUnreadable is Manager.ClearUnreadable for a model.
func (c *Calc) ClearUnreadable(k api.Kind, name string) bool { return c.clearUnreadable(k, name) }

func (c *Calc) setUnreadable(k api.Kind, name string, why error) error {
	p, scope, workloadsOnly, err := unreadableDeny(k, name)
	if err != nil {
		return err
	}
	np, err := compilePolicy(p)
	if err != nil {
		return fmt.Errorf("policy: the deny for unreadable %s %q: %w", k, name, err)
	}
	np.workloadsOnly = workloadsOnly
	np.key = UnreadableKey(k, name)
	np.tier, np.order, np.name = UnreadableTier, math.Inf(-1), np.key
	c.replacePolicy(np.key, np)
	if c.unreadable == nil {
		c.unreadable = map[string]UnreadableRecord{}
	}
	msg := ""
	if why != nil {
		msg = why.Error()
	}
	c.unreadable[np.key] = UnreadableRecord{Kind: k, Name: name, Scope: scope, Error: msg}
	return nil
}

func (c *Calc) clearUnreadable(k api.Kind, name string) bool {
	key := UnreadableKey(k, name)
	if _, ok := c.unreadable[key]; !ok {
		return false
	}
	delete(c.unreadable, key)
	c.DeletePolicy(key)
	return true
}

func (c *Calc) unreadableList() []UnreadableRecord {
	out := make([]UnreadableRecord, 0, len(c.unreadable))
	for _, r := range c.unreadable {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b UnreadableRecord) int {
		return strings.Compare(string(a.Kind)+"\x00"+a.Name, string(b.Kind)+"\x00"+b.Name)
	})
	return out
}

// unreadableDeny is the policy that denies for an unreadable record of
// kind k named name, whose traffic it stops, and whether it stays off
// host endpoints.
func unreadableDeny(k api.Kind, name string) (p api.Policy, scope string, workloadsOnly bool, err error) {
	deny := []api.Rule{{Action: api.ActionDeny}}
	both := []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
	spec := api.PolicySpec{Selector: "all()", Types: both, Ingress: deny, Egress: deny}
	if !slices.Contains(UnreadableKinds, k) {
		return nil, "", false, fmt.Errorf("policy: unreadable %s %q: no deny is defined for the kind", k, name)
	}
	if k == api.KindNetworkPolicy {
		// A NetworkPolicy selects in its namespace alone, never host
		// endpoints. A key without a namespace (no routed writer makes
		// one) says nothing of where: the deny below, of everything.
		if ns, n := api.SplitStoreName(k, name); ns != "" && n != "" {
			np := &api.NetworkPolicy{Metadata: api.ObjectMeta{Namespace: ns, Name: "unreadable." + n}}
			np.Spec.PolicySpec = spec
			return np, "namespace " + ns, true, nil
		}
	}
	// Every workload, of every namespace and of none, and this node's
	// host endpoints in their normal and forward contexts (what a
	// preDNAT or untracked policy would have decided comes to those):
	// a global policy, a tier, or a set, profile or Service a rule
	// names may apply to either. The host endpoints' chains keep what
	// no policy may cut first: established flows, the failsafe ports,
	// the tunnels' peers.
	g := &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "unreadable"}}
	g.Spec.PolicySpec = spec
	g.Spec.ApplyOnForward = true
	return g, "all workload and host endpoints", false, nil
}
