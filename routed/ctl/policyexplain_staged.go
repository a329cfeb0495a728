package ctl

import (
	"context"
	"fmt"
	"io"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/controllers"
)

// stagedKinds are the staged policies explain evaluates after the
// enforced verdict, in the order it prints them.
var stagedKinds = []api.Kind{api.KindStagedGlobalNetworkPolicy, api.KindStagedNetworkPolicy, api.KindStagedKubernetesNetworkPolicy}

// stagedPolicies reads the staged policies for StagedForModel.
func stagedPolicies(ctx context.Context, ds *datastore.Client) ([]policy.StagedPolicy, []string, error) {
	var rs []api.Resource
	for _, k := range stagedKinds {
		list, _, err := ds.List(ctx, k)
		if err != nil {
			return nil, nil, err
		}
		rs = append(rs, list...)
	}
	return StagedForModel(rs)
}

// StagedForModel gives staged policies the form the model evaluates
// (policy.Calc.ExplainStaged): each with its enforced twin, a
// StagedKubernetesNetworkPolicy converted exactly as the controllers
// convert a Kubernetes NetworkPolicy, and notes for what that
// conversion could not express. Any other resource is an error.
func StagedForModel(rs []api.Resource) ([]policy.StagedPolicy, []string, error) {
	var out []policy.StagedPolicy
	var notes []string
	for _, r := range rs {
		k := r.GetKind()
		s, ok := policy.StagedFromAPI(r)
		switch p := r.(type) {
		case *api.StagedKubernetesNetworkPolicy:
			c, err := controllers.ConvertStagedKubernetesNetworkPolicy(p)
			if err != nil {
				return nil, nil, err
			}
			s.Action, s.Policy = p.Action(), c.Policy
			for _, pr := range c.Problems {
				notes = append(notes, fmt.Sprintf("%s %s: %s", k, api.StoreName(r), pr))
			}
		default:
			if !ok {
				return nil, nil, fmt.Errorf("%s %s is not a staged policy", k, api.StoreName(r))
			}
		}
		out = append(out, s)
	}
	return out, notes, nil
}

// printStaged prints what each staged policy would decide, and all of
// them together when there are several.
func printStaged(out io.Writer, r ExplainResult) {
	if len(r.Staged) == 0 {
		fmt.Fprintln(out, "staged policies: none applies to either endpoint")
		return
	}
	fmt.Fprintln(out, "staged policies (never enforced; the flow's fate if each alone were):")
	for _, v := range r.Staged {
		what := "adds " + v.Twin
		switch {
		case v.Action == api.StagedActionDelete && v.TwinExists:
			what = "removes " + v.Twin
		case v.Action == api.StagedActionDelete:
			what = "would remove " + v.Twin + ", which does not exist"
		case v.TwinExists:
			what = "replaces " + v.Twin
		}
		fmt.Fprintf(out, "  %s (%s %s, %s):\n", v.Policy, v.Kind, v.Action, what)
		printStagedVerdict(out, r, v)
	}
	if t := r.StagedTogether; t != nil && len(r.Staged) > 1 {
		fmt.Fprintln(out, "  all staged policies together:")
		printStagedVerdict(out, r, *t)
	}
	for _, n := range r.StagedNotes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
}

// printStagedVerdict prints one staged verdict's decisions and fate
// against the enforced one.
func printStagedVerdict(out io.Writer, r ExplainResult, v policy.StagedVerdict) {
	if v.Error != "" {
		fmt.Fprintf(out, "    %s\n", v.Error)
		return
	}
	for _, d := range []*policy.Decision{v.Egress, v.Ingress} {
		if d != nil {
			printDecision(out, "    ", *d)
		}
	}
	verdict := "denied"
	if v.Allowed {
		verdict = "allowed"
	}
	change := "as enforced"
	switch {
	case v.Allowed != r.Allowed && r.Allowed:
		change = "enforced: allowed"
	case v.Allowed != r.Allowed:
		change = "enforced: denied"
	case v.Changed:
		change = "as enforced, by another rule"
	}
	fmt.Fprintf(out, "    staged verdict: %s (%s)\n", verdict, change)
}
