package policy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/routed-net/routed/pkg/api"
)

// ErrSelectionRefused is SetPolicyFailClosed's refusal of a policy whose
// selection itself cannot be compiled: nothing of it is installed
// (felix then denies for it as for an unreadable record: RefusalFailsClosed).
var ErrSelectionRefused = errors.New("policy: its selection cannot be compiled, so no deny of what it selects could stand for it")

// RefusalFailsClosed reports whether err, the refusal of a record of
// kind k, leaves nothing of it in force, so that felix must deny for it
// as for an unreadable record (SetUnreadable): a policy whose selection
// is refused, or a profile, network set or Service's endpoints refused
// (a policy refused for its rules is installed as a deny of what it
// selects).
func RefusalFailsClosed(k api.Kind, err error) bool {
	if err == nil || !slices.Contains(UnreadableKinds, k) {
		return false
	}
	if k == api.KindNetworkPolicy || k == api.KindGlobalNetworkPolicy {
		return errors.Is(err, ErrSelectionRefused)
	}
	return true
}

// SetPolicyFailClosed is SetPolicy for the dataplane: a policy whose
// rules felix refuses is installed as a policy that denies everything
// in its directions, for the endpoints its selector picks, at its place
// in its tier, instead of being left out (which would leave those
// endpoints to the rest of their tiers and to their profiles, allow-all
// for a Kubernetes namespace's, and keep an edited policy's previous
// version in force). The refusal is still returned, for the caller to
// report. A policy whose selection itself cannot be compiled (its
// selector, namespace or types) picks no one known: it is refused
// as by SetPolicy with ErrSelectionRefused, nothing changes, and the
// caller denies for it (RefusalFailsClosed).
func (m *Manager) SetPolicyFailClosed(p api.Policy) error { return m.calc.setPolicyFailClosed(p) }

func (c *Calc) setPolicyFailClosed(p api.Policy) error {
	err := c.SetPolicy(p)
	if err == nil {
		return nil
	}
	deny, derr := denyingPolicy(p)
	var np *cpolicy
	if derr == nil {
		np, derr = compilePolicy(deny)
	}
	if derr != nil {
		return fmt.Errorf("%w: %w", ErrSelectionRefused, err)
	}
	c.replacePolicy(np.key, np)
	return fmt.Errorf("%w (the policy denies all traffic of the endpoints it selects, in its directions, until it is fixed)", err)
}

// denyingPolicy is p with its rules replaced by one Deny in each
// direction p applies to; selector, tier, order, types and host
// endpoint fields are p's. Types left empty are derived from which rule
// lists are empty, so the copy keeps p's directions.
func denyingPolicy(p api.Policy) (api.Policy, error) {
	deny := []api.Rule{{Action: api.ActionDeny}}
	var out api.Policy
	switch v := p.(type) {
	case *api.NetworkPolicy:
		x := *v
		out = &x
	case *api.GlobalNetworkPolicy:
		x := *v
		out = &x
	default:
		return nil, fmt.Errorf("%w: kind %s is not a policy", ErrInvalid, p.GetKind())
	}
	orig, spec := p.Policy(), out.Policy()
	spec.Ingress, spec.Egress = nil, nil
	explicit := len(orig.Types) > 0
	if explicit || len(orig.Ingress) > 0 || len(orig.Egress) == 0 {
		spec.Ingress = deny
	}
	if explicit || len(orig.Egress) > 0 {
		spec.Egress = deny
	}
	return out, nil
}
