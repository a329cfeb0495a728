package policy

import (
	"errors"
	"fmt"

	"github.com/routed-net/routed/pkg/api"
)

// KindStagedPolicyRule is the Kind of a staged policy's rule in a
// staged decision. Such a rule is in no kernel chain, so it has no
// counter ID.
const KindStagedPolicyRule = "staged policy rule"

// ErrNotModel is returned by ExplainStaged on a calculator that
// programs a dataplane: evaluating a staged policy changes the model
// for a moment, which only a model (NewModel) may do.
var ErrNotModel = errors.New("policy: staged policies are evaluated on a model (NewModel) only, never on the calculator that programs the kernel")

// StagedPolicy is a staged policy as the model evaluates it. Staged
// policies are never given to SetPolicy (felix never sees them); only
// ExplainStaged puts one in the model, for the time of one evaluation.
type StagedPolicy struct {
	// Kind, Namespace and Name name the staged resource.
	Kind      api.Kind
	Namespace string
	Name      string
	Action    api.StagedAction
	// Policy is the enforced policy it stands for (its twin): for Set
	// the policy it would add or replace, for Delete the one it would
	// remove (only its kind, namespace and name are read then). See
	// api.StagedNetworkPolicy.Enforced and, for a
	// StagedKubernetesNetworkPolicy, the controllers' conversion.
	Policy api.Policy
}

// Key names the staged policy in staged decisions as PolicyKey names
// enforced ones: "staged:" and its kind's short name, "snp:<ns>/<name>",
// "sgnp:<name>", "sknp:<ns>/<name>".
func (s StagedPolicy) Key() string {
	switch s.Kind {
	case api.KindStagedNetworkPolicy:
		return "staged:snp:" + s.Namespace + "/" + s.Name
	case api.KindStagedKubernetesNetworkPolicy:
		return "staged:sknp:" + s.Namespace + "/" + s.Name
	}
	return "staged:sgnp:" + s.Name
}

// StagedFromAPI gives a Calico staged policy (StagedNetworkPolicy,
// StagedGlobalNetworkPolicy) the form the model evaluates, with its
// enforced twin (Enforced); ok is false for any other resource (a
// StagedKubernetesNetworkPolicy's twin is the controllers' conversion).
func StagedFromAPI(r api.Resource) (s StagedPolicy, ok bool) {
	s = StagedPolicy{Kind: r.GetKind(), Namespace: r.Meta().Namespace, Name: r.Meta().Name}
	switch p := r.(type) {
	case *api.StagedNetworkPolicy:
		s.Action, s.Policy = p.Action(), p.Enforced()
	case *api.StagedGlobalNetworkPolicy:
		s.Action, s.Policy = p.Action(), p.Enforced()
	default:
		return s, false
	}
	return s, true
}

// StagedVerdict is what a flow would meet if one staged policy were
// enforced: its action applied to the model (Set: its twin added or
// replaced by it; Delete: its twin removed), every other policy as it
// is.
type StagedVerdict struct {
	Policy string           `json:"policy"` // StagedPolicy.Key
	Kind   api.Kind         `json:"kind"`
	Action api.StagedAction `json:"stagedAction"`
	// Twin is the enforced policy it sets or removes (PolicyKey);
	// TwinExists says whether that policy is in the model now.
	Twin       string `json:"twin"`
	TwinExists bool   `json:"twinExists"`
	// Egress and Ingress are the directions whose endpoint the staged
	// policy or its twin applies to, decided under the staged model;
	// nil for a direction neither applies to (it keeps the enforced
	// decision).
	Egress  *Decision `json:"egress,omitempty"`
	Ingress *Decision `json:"ingress,omitempty"`
	// Allowed is the flow's fate under the staged model; Changed says
	// that a direction's verdict or deciding rule differs from the
	// enforced one.
	Allowed bool `json:"allowed"`
	Changed bool `json:"changed"`
	// Error says why the staged policy could not be evaluated (a
	// policy felix would refuse); nothing else is then set.
	Error string `json:"error,omitempty"`
}

// ExplainStaged evaluates f once per staged policy that applies (or
// whose twin applies) to the source's egress or the destination's
// ingress, with that staged policy's action applied to the model
// (routed's per-policy counterpart of Calico's pending verdicts; see
// ExplainStagedTogether for all at once); enforced is the model's
// Explain of f. Staged policies that apply to neither are left out.
// The model is the same after it returns as before.
func (c *Calc) ExplainStaged(f Flow, enforced Explanation, staged []StagedPolicy) ([]StagedVerdict, error) {
	if _, ok := c.sink.(discard); !ok {
		return nil, ErrNotModel
	}
	var out []StagedVerdict
	for _, s := range staged {
		v, relevant := c.explainOneStaged(f, enforced, s)
		if relevant {
			out = append(out, v)
		}
	}
	return out, nil
}

// stagedApplied is one staged policy applied to the model: the twin's
// key, the version it replaced (nil: none) and whether the staged
// policy or its twin applies to the flow's source at egress and to its
// destination at ingress.
type stagedApplied struct {
	key             string
	old             *cpolicy
	egress, ingress bool
}

// applyStaged applies s to the model; undo puts back what it replaced.
// An error (a policy felix would refuse, an unknown action) changes
// nothing.
func (c *Calc) applyStaged(f Flow, s StagedPolicy) (stagedApplied, error) {
	if s.Policy == nil {
		return stagedApplied{}, errors.New("it names no enforced policy")
	}
	key := PolicyKey(s.Policy)
	a := stagedApplied{key: key, old: c.policies[key]}
	src, dst := c.endpointAt(f.Src), c.endpointAt(f.Dst)
	a.egress, a.ingress = c.concerns(a.old, src, false), c.concerns(a.old, dst, true)
	switch s.Action {
	case api.StagedActionSet, "":
		if err := c.SetPolicy(s.Policy); err != nil {
			return a, fmt.Errorf("felix would refuse it as %s: %w", key, err)
		}
		np := c.policies[key]
		a.egress, a.ingress = a.egress || c.concerns(np, src, false), a.ingress || c.concerns(np, dst, true)
	case api.StagedActionDelete:
		c.DeletePolicy(key)
	default:
		return a, fmt.Errorf("stagedAction %q is neither Set nor Delete", s.Action)
	}
	return a, nil
}

// undo puts the twin back as it was (or removes it if there was none).
func (c *Calc) undo(a stagedApplied) { c.replacePolicy(a.key, a.old) }

// explainOneStaged applies s, decides the directions it concerns and
// puts the model back as it was.
func (c *Calc) explainOneStaged(f Flow, enforced Explanation, s StagedPolicy) (StagedVerdict, bool) {
	v := StagedVerdict{Policy: s.Key(), Kind: s.Kind, Action: s.Action}
	a, err := c.applyStaged(f, s)
	v.Twin, v.TwinExists = a.key, a.old != nil
	if err != nil {
		v.Error = "not evaluated: " + err.Error()
		return v, true
	}
	defer c.undo(a)
	if !a.egress && !a.ingress {
		return v, false
	}
	c.decideStaged(f, enforced, &v, a.egress, a.ingress, map[string]string{a.key: v.Policy})
	return v, true
}

// ExplainStagedTogether evaluates f with every staged policy's action
// applied at once (in the order given: a later one on the same twin
// wins): the flow's fate if all of them were enforced, routed's
// counterpart of Calico's pending verdict (which keeps the twins beside
// the staged policies and leaves Deletes out). Both directions are decided; each staged
// policy's rules are named as its own. It is nil when no staged policy
// (nor its twin) applies to either endpoint, and it is not evaluated
// (Error) when felix would refuse one of them. The model is the same
// after it returns as before.
func (c *Calc) ExplainStagedTogether(f Flow, enforced Explanation, staged []StagedPolicy) (*StagedVerdict, error) {
	if _, ok := c.sink.(discard); !ok {
		return nil, ErrNotModel
	}
	v := &StagedVerdict{Policy: "staged:*"}
	names := map[string]string{}
	var applied []stagedApplied
	defer func() {
		for i := len(applied) - 1; i >= 0; i-- {
			c.undo(applied[i])
		}
	}()
	relevant := false
	for _, s := range staged {
		a, err := c.applyStaged(f, s)
		if err != nil {
			v.Error = fmt.Sprintf("not evaluated: %s: %v", s.Key(), err)
			return v, nil
		}
		applied = append(applied, a)
		names[a.key] = s.Key()
		relevant = relevant || a.egress || a.ingress
	}
	if !relevant {
		return nil, nil
	}
	c.decideStaged(f, enforced, v, true, true, names)
	return v, nil
}

// decideStaged decides the directions asked for under the model as it
// now is, names the staged policies' rules (names: twin key -> staged
// name) and compares with the enforced verdict.
func (c *Calc) decideStaged(f Flow, enforced Explanation, v *StagedVerdict, egress, ingress bool, names map[string]string) {
	eg, in := enforced.Egress, enforced.Ingress
	if egress {
		d := c.decide(f, false)
		markStaged(&d, names)
		v.Egress, eg = &d, d
	}
	if ingress {
		d := c.decide(f, true)
		markStaged(&d, names)
		v.Ingress, in = &d, d
	}
	v.Allowed = eg.Allowed && in.Allowed
	v.Changed = eg.Allowed != enforced.Egress.Allowed || eg.Rule != enforced.Egress.Rule ||
		in.Allowed != enforced.Ingress.Allowed || in.Rule != enforced.Ingress.Rule
}

// concerns reports whether p applies to e's traffic in a direction.
func (c *Calc) concerns(p *cpolicy, e *endpoint, in bool) bool {
	return p != nil && e != nil && p.applies(in) && p.sel.group(e.g)
}

// markStaged names the staged policies' rules as their own (names:
// twin key -> staged name): they are their twins' keys in the model,
// and no kernel chain has them.
func markStaged(d *Decision, names map[string]string) {
	mark := func(r *RuleInfo) {
		if staged, ok := names[r.Policy]; ok && r.Kind == KindPolicyRule {
			r.Kind, r.Policy, r.ID = KindStagedPolicyRule, staged, ""
		}
	}
	mark(&d.Rule)
	for i := range d.Passed {
		mark(&d.Passed[i])
	}
	for i := range d.Logged {
		mark(&d.Logged[i])
	}
}
