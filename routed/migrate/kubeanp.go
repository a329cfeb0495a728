package migrate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/routed-net/routed/pkg/api"
)

// Kubernetes' admin network policies (sigs.k8s.io/network-policy-api).
// Calico 3.29 and later enforce AdminNetworkPolicy and
// BaselineAdminNetworkPolicy of v1alpha1, as GlobalNetworkPolicies
// kanp.adminnetworkpolicy.<name> and kbanp.baselineadminnetworkpolicy.<name>
// in its tiers adminnetworkpolicy and baselineadminnetworkpolicy.
// routed's controllers do not watch v1alpha1: they convert only
// ClusterNetworkPolicy of v1beta1 (routed/controllers/cnp.go), which
// replaced both. An enforced v1alpha1 policy is therefore a policy loss.
var (
	anpV1alpha1 = schema.GroupVersion{Group: "policy.networking.k8s.io", Version: "v1alpha1"}
	cnpV1beta1  = schema.GroupVersion{Group: "policy.networking.k8s.io", Version: "v1beta1"}
)

// adminKinds are the v1alpha1 kinds, by plural, with the prefix of the
// names Calico gives their conversions.
var adminKinds = []struct{ plural, kind, prefix string }{
	{"adminnetworkpolicies", "AdminNetworkPolicy", "kanp.adminnetworkpolicy."},
	{"baselineadminnetworkpolicies", "BaselineAdminNetworkPolicy", "kbanp.baselineadminnetworkpolicy."},
}

// Names Calico gives the policies it converts from Kubernetes objects
// that routed's controllers convert too (from the same originals, which
// stay in Kubernetes): networking.k8s.io/v1 NetworkPolicies and
// ClusterNetworkPolicies of v1beta1.
const (
	knpPrefix  = "knp.default."
	kcnpPrefix = "kcnp."
)

const anpNotWatched = "routed's controllers do not watch AdminNetworkPolicy or BaselineAdminNetworkPolicy (policy.networking.k8s.io/v1alpha1), which Calico enforces; they convert only ClusterNetworkPolicy of v1beta1 (docs/cluster-network-policy.md)"

// derivedPolicy classifies a Calico policy Calico converted from a
// Kubernetes object, by its name: carried says routed's controllers
// convert the original (it is only listed), otherwise its absence is a
// loss; ok is false for any other policy.
func (s *kubeSource) derivedPolicy(k api.Kind, u *unstructured.Unstructured) (reason string, carried, ok bool) {
	if k != api.KindNetworkPolicy && k != api.KindGlobalNetworkPolicy {
		return "", false, false
	}
	name := u.GetName()
	switch {
	case strings.HasPrefix(name, knpPrefix):
		return fmt.Sprintf("converted by Calico from a Kubernetes policy, a networking.k8s.io/v1 NetworkPolicy (its name starts %s); routed's controllers convert the original, which stays where it is", knpPrefix), true, true
	case strings.HasPrefix(name, kcnpPrefix):
		if s.cnpServed {
			return fmt.Sprintf("converted by Calico from a ClusterNetworkPolicy (its name starts %s); routed's controllers convert the %s original, which stays where it is", kcnpPrefix, cnpV1beta1), true, true
		}
		return fmt.Sprintf("converted by Calico from a ClusterNetworkPolicy (its name starts %s), but the API server serves no clusternetworkpolicies in %s, the only version routed's controllers watch", kcnpPrefix, cnpV1beta1), false, true
	}
	for _, a := range adminKinds {
		if strings.HasPrefix(name, a.prefix) {
			return fmt.Sprintf("converted by Calico from the %s %s; %s", a.kind, strings.TrimPrefix(name, a.prefix), anpNotWatched), false, true
		}
	}
	return "", false, false
}

// servedIn lists the plurals the API server serves in gv; a group version
// it does not serve is empty.
func (s *kubeSource) servedIn(gv schema.GroupVersion) (map[string]bool, error) {
	list, err := s.kube.Discovery().ServerResourcesForGroupVersion(gv.String())
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("migrate: asking the API server for %s: %w", gv, err)
	}
	served := map[string]bool{}
	if list != nil {
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") {
				served[r.Name] = true
			}
		}
	}
	return served, nil
}

// discoverAdmin finds which admin network policy kinds the API server
// serves.
func (s *kubeSource) discoverAdmin() error {
	alpha, err := s.servedIn(anpV1alpha1)
	if err != nil {
		return err
	}
	beta, err := s.servedIn(cnpV1beta1)
	if err != nil {
		return err
	}
	s.anpServed, s.cnpServed = alpha, beta["clusternetworkpolicies"]
	return nil
}

// adminPolicies records each AdminNetworkPolicy and
// BaselineAdminNetworkPolicy the API server holds as a policy loss, and
// then each of Calico's conversions of one (derived, "<plural>/<name>"
// of the original to the loss) whose original was not listed. A list
// that fails is an error: policy that may be enforced is never passed
// over unseen.
func (s *kubeSource) adminPolicies(ctx context.Context, st *calicoState, derived map[string]PolicyLoss) error {
	listed := map[string]bool{}
	for _, a := range adminKinds {
		if !s.anpServed[a.plural] {
			continue
		}
		gvr := anpV1alpha1.WithResource(a.plural)
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := s.dyn.Resource(gvr).List(ctx, opts)
			if err != nil {
				return fmt.Errorf("migrate: listing %s.%s (Calico enforces them; routed would not): %w", a.plural, anpV1alpha1.Group, err)
			}
			for i := range l.Items {
				u := &l.Items[i]
				listed[a.plural+"/"+u.GetName()] = true
				st.losses = append(st.losses, PolicyLoss{Kind: a.kind, Name: u.GetName(),
					Reason:      fmt.Sprintf("%s; it stays in Kubernetes, unenforced (re-express it as a %s ClusterNetworkPolicy, tier %s)", anpNotWatched, cnpV1beta1, adminTier(a.kind)),
					Consequence: adminLoss(u.Object)})
			}
			if opts.Continue = l.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(derived)) {
		if !listed[key] {
			st.losses = append(st.losses, derived[key])
		}
	}
	return nil
}

func adminTier(kind string) string {
	if kind == "AdminNetworkPolicy" {
		return "Admin"
	}
	return "Baseline"
}

// adminLoss is what an admin network policy's absence allows, from its
// rules (actions Allow, Deny, Pass).
func adminLoss(obj map[string]any) string {
	spec, _ := obj["spec"].(map[string]any)
	count := ruleActions(spec)
	parts := []string{fmt.Sprintf("traffic its %d Deny rule(s) denied would be allowed", count["Deny"])}
	if n := count["Allow"]; n > 0 {
		parts = append(parts, fmt.Sprintf("traffic its %d Allow rule(s) allowed ahead of namespaces' NetworkPolicies would be judged by those instead", n))
	}
	if n := count["Pass"]; n > 0 {
		parts = append(parts, fmt.Sprintf("its %d Pass rule(s) would no longer skip the rest of the admin tier", n))
	}
	return "routed would not enforce it: " + strings.Join(parts, "; ")
}

// adminOriginal is "<plural>/<name>" of the admin network policy a
// Calico conversion named name stands for, or name itself when it is
// none.
func adminOriginal(name string) string {
	for _, a := range adminKinds {
		if n, ok := strings.CutPrefix(name, a.prefix); ok {
			return a.plural + "/" + n
		}
	}
	return name
}
