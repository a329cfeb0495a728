package policy

import (
	"fmt"
	"math"
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
// a Deny rule names, would let through what it stops. Endpoints (taken
// undecoded; a pod whose record is unreadable has no rules and its
// interface drops) and host endpoints are not among them: an unreadable
// HostEndpoint is skipped as before (docs/policy.md).
var UnreadableKinds = []api.Kind{api.KindTier, api.KindNetworkPolicy, api.KindGlobalNetworkPolicy,
	api.KindProfile, api.KindNetworkSet, api.KindGlobalNetworkSet, api.KindServiceEndpoints}

// UnreadableKey is the policy key of the deny standing for the record
// of kind k named name (its datastore name).
func UnreadableKey(k api.Kind, name string) string {
	return "unreadable:" + string(k) + ":" + name
}

// SetUnreadable fails closed for a record of a policy kind that is
// stored but does not decode (corrupt, or written by something that is
// not routed): what it says is unknown, so it may deny or isolate
// anything it could. Until the record is readable again (set or
// deleted) a policy in UnreadableTier, before every tier, denies all
// traffic in both directions of:
//   - a NetworkPolicy's namespace's workload endpoints (a NetworkPolicy
//     selects in its namespace alone);
//   - every workload endpoint, for the other kinds (a global policy, a
//     tier, a profile, whose labels other namespaces' selectors see,
//     a network set, a Service's endpoints: their reach is not bounded).
//
// Host endpoints are left to their own policies. The caller removes
// the record's previous version first (it is not the record's now).
// why is the decode error, for the log and for Unreadable.
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
}

// Unreadable lists the records felix denies for, by kind and name.
func (m *Manager) Unreadable() []UnreadableRecord { return m.calc.unreadableList() }

// SetUnreadable is Manager.SetUnreadable for a model (NewModel): explain
// evaluates flows with the denies felix installs.
func (c *Calc) SetUnreadable(k api.Kind, name string, why error) error {
	return c.setUnreadable(k, name, why)
}

func (c *Calc) setUnreadable(k api.Kind, name string, why error) error {
	p, scope, err := unreadableDeny(k, name)
	if err != nil {
		return err
	}
	np, err := compilePolicy(p)
	if err != nil {
		return fmt.Errorf("policy: the deny for unreadable %s %q: %w", k, name, err)
	}
	np.workloadsOnly = true
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
// kind k named name, and whose traffic it stops.
func unreadableDeny(k api.Kind, name string) (api.Policy, string, error) {
	deny := []api.Rule{{Action: api.ActionDeny}}
	both := []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
	spec := api.PolicySpec{Selector: "all()", Types: both, Ingress: deny, Egress: deny}
	switch k {
	case api.KindNetworkPolicy:
		ns, n := api.SplitStoreName(k, name)
		if ns == "" || n == "" {
			return nil, "", fmt.Errorf("policy: unreadable %s: bad name %q (want <namespace>.<name>)", k, name)
		}
		p := &api.NetworkPolicy{Metadata: api.ObjectMeta{Namespace: ns, Name: "unreadable." + n}}
		p.Spec.PolicySpec = spec
		return p, "namespace " + ns, nil
	case api.KindGlobalNetworkPolicy, api.KindTier, api.KindProfile, api.KindNetworkSet,
		api.KindGlobalNetworkSet, api.KindServiceEndpoints:
		// Workloads of every namespace and of none; not host
		// endpoints (setUnreadable keeps it off them).
		p := &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "unreadable"}}
		p.Spec.PolicySpec = spec
		return p, "all workload endpoints", nil
	}
	return nil, "", fmt.Errorf("policy: unreadable %s %q: no deny is defined for the kind", k, name)
}
