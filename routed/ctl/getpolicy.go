package ctl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// policyColumns gives the table columns of the policy model's kinds;
// ok is false for other kinds.
func policyColumns(k api.Kind, wide bool) (head []string, row func(api.Resource) []string, ok bool) {
	switch k {
	case api.KindTier:
		return []string{"NAME", "ORDER", "DEFAULTACTION"}, func(r api.Resource) []string {
			t := r.(*api.Tier)
			action := "Deny"
			if t.Spec.DefaultAction != nil {
				action = string(*t.Spec.DefaultAction)
			}
			return []string{t.Metadata.Name, order(t.Spec.Order), action}
		}, true
	case api.KindNetworkPolicy, api.KindGlobalNetworkPolicy:
		return pick(wide, []string{"NAME", "TIER", "ORDER", "SELECTOR"}, []string{"TYPES", "INGRESS", "EGRESS"}), func(r api.Resource) []string {
			p := r.(api.Policy).Policy()
			types := make([]string, len(p.Types))
			for i, t := range p.Types {
				types[i] = string(t)
			}
			return pick(wide, []string{qualified(r), p.Tier, order(p.Order), dash(p.Selector)},
				[]string{strings.Join(types, ","), strconv.Itoa(len(p.Ingress)) + " rules", strconv.Itoa(len(p.Egress)) + " rules"})
		}, true
	case api.KindStagedNetworkPolicy, api.KindStagedGlobalNetworkPolicy, api.KindStagedKubernetesNetworkPolicy:
		head, row := stagedColumns(wide)
		return head, row, true
	case api.KindProfile:
		return []string{"NAME", "LABELS", "INGRESS", "EGRESS"}, func(r api.Resource) []string {
			p := r.(*api.Profile)
			return []string{p.Metadata.Name, strconv.Itoa(len(p.Spec.LabelsToApply)), strconv.Itoa(len(p.Spec.Ingress)) + " rules", strconv.Itoa(len(p.Spec.Egress)) + " rules"}
		}, true
	case api.KindNetworkSet:
		return []string{"NAME", "NETS"}, func(r api.Resource) []string {
			return []string{qualified(r), strings.Join(r.(*api.NetworkSet).Spec.Nets, ",")}
		}, true
	case api.KindGlobalNetworkSet:
		return []string{"NAME", "NETS"}, func(r api.Resource) []string {
			return []string{r.Meta().Name, strings.Join(r.(*api.GlobalNetworkSet).Spec.Nets, ",")}
		}, true
	}
	return nil, nil, false
}

// stagedColumns are the staged policies' columns: their twins', with
// the staged action (a Kubernetes one's tier is always default, its
// order 1000 and its selector the pod selector's labels).
func stagedColumns(wide bool) ([]string, func(api.Resource) []string) {
	return pick(wide, []string{"NAME", "ACTION", "TIER", "ORDER", "SELECTOR"}, []string{"TYPES", "INGRESS", "EGRESS"}), func(r api.Resource) []string {
		var action api.StagedAction
		var p *api.PolicySpec
		switch s := r.(type) {
		case *api.StagedNetworkPolicy:
			action, p = s.Action(), &s.Spec.PolicySpec
		case *api.StagedGlobalNetworkPolicy:
			action, p = s.Action(), &s.Spec.PolicySpec
		case *api.StagedKubernetesNetworkPolicy:
			k := s.Spec.K8sNetworkPolicySpec
			sel := make([]string, 0, len(k.PodSelector.MatchLabels)+len(k.PodSelector.MatchExpressions))
			for _, l := range slices.Sorted(maps.Keys(k.PodSelector.MatchLabels)) {
				sel = append(sel, l+"="+k.PodSelector.MatchLabels[l])
			}
			for _, e := range k.PodSelector.MatchExpressions {
				sel = append(sel, e.Key+" "+e.Operator+" "+strings.Join(e.Values, ","))
			}
			podSel := "(all pods)"
			if len(sel) > 0 {
				podSel = strings.Join(sel, ",")
			}
			return pick(wide, []string{qualified(r), string(s.Action()), api.DefaultTierName, "1000", podSel},
				[]string{strings.Join(k.PolicyTypes, ","), strconv.Itoa(len(k.Ingress)) + " rules", strconv.Itoa(len(k.Egress)) + " rules"})
		}
		types := make([]string, len(p.Types))
		for i, t := range p.Types {
			types[i] = string(t)
		}
		return pick(wide, []string{qualified(r), string(action), p.Tier, order(p.Order), dash(p.Selector)},
			[]string{dash(strings.Join(types, ",")), strconv.Itoa(len(p.Ingress)) + " rules", strconv.Itoa(len(p.Egress)) + " rules"})
	}
}

// qualified names a resource as "namespace/name" when it has a namespace.
func qualified(r api.Resource) string {
	if ns := r.Meta().Namespace; ns != "" {
		return ns + "/" + r.Meta().Name
	}
	return r.Meta().Name
}

func order(o *float64) string {
	if o == nil {
		return "(last)"
	}
	return strconv.FormatFloat(*o, 'g', -1, 64)
}

// storeName turns a name typed on the command line into the name the
// datastore keeps: for a namespaced kind "NAMESPACE/NAME", or NAME with
// -n NAMESPACE.
func storeName(k api.Kind, namespace, arg string) (string, error) {
	ns, name, hasSlash := strings.Cut(arg, "/")
	if !k.Namespaced() {
		if namespace != "" || hasSlash {
			return "", usageError("%s is not namespaced: give its name alone", k)
		}
		return arg, nil
	}
	if !hasSlash {
		ns, name = namespace, arg
	} else if namespace != "" && namespace != ns {
		return "", usageError("%q names namespace %q but -n says %q", arg, ns, namespace)
	}
	if ns == "" || name == "" {
		return "", usageError("a %s is named NAMESPACE/NAME or -n NAMESPACE NAME, not %q", k, arg)
	}
	return api.NamespacedName(k, ns, name), nil
}

// inNamespace keeps the resources of one namespace.
func inNamespace(rs []api.Resource, namespace string) []api.Resource {
	var out []api.Resource
	for _, r := range rs {
		if r.Meta().Namespace == namespace {
			out = append(out, r)
		}
	}
	return out
}

// ensureTiersFor creates the tiers that always exist before resources
// that may name them are written, so a policy in the default tier can be
// applied to a datastore no routed node has started on yet.
func ensureTiersFor(ctx context.Context, c *datastore.Client, rs []api.Resource) error {
	for _, r := range rs {
		if _, tiered := tierOf(r); tiered || r.GetKind() == api.KindTier {
			return c.EnsureDefaultTiers(ctx)
		}
	}
	return nil
}

// tierOf is the tier a policy or a staged policy is in; ok is false for
// other kinds. Calico refuses a staged policy in a tier that does not
// exist, as it refuses a policy.
func tierOf(r api.Resource) (tier string, ok bool) {
	switch p := r.(type) {
	case api.Policy:
		return p.Policy().Tier, true
	case *api.StagedNetworkPolicy:
		return p.Spec.Tier, true
	case *api.StagedGlobalNetworkPolicy:
		return p.Spec.Tier, true
	case *api.StagedKubernetesNetworkPolicy:
		return api.DefaultTierName, true
	}
	return "", false
}

// tiersFirst checks, before anything is written, that every policy's
// tier exists or is in the same file, and returns rs with the file's
// tiers moved to the front (otherwise in file order) so they exist when
// their policies are written.
func tiersFirst(ctx context.Context, c *datastore.Client, rs []api.Resource) ([]api.Resource, error) {
	var tiers, rest []api.Resource
	inFile := map[string]bool{}
	for _, r := range rs {
		if r.GetKind() == api.KindTier {
			tiers = append(tiers, r)
			inFile[r.Meta().Name] = true
		} else {
			rest = append(rest, r)
		}
	}
	known := map[string]bool{}
	for _, r := range rest {
		tier, ok := tierOf(r)
		if !ok {
			continue
		}
		if inFile[tier] || known[tier] {
			continue
		}
		if _, err := c.Get(ctx, api.KindTier, tier); datastore.IsNotFound(err) {
			return nil, fmt.Errorf("%s %s: spec.tier %q: %w (not in the datastore nor in the file; nothing was written)", r.GetKind(), qualified(r), tier, datastore.ErrUnknownTier)
		} else if err != nil {
			return nil, err
		}
		known[tier] = true
	}
	return append(tiers, rest...), nil
}
