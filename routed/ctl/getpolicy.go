package ctl

import (
	"strconv"
	"strings"

	"github.com/routed-net/routed/pkg/api"
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
