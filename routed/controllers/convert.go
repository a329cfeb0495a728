package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/routed-net/routed/pkg/api"
)

// Ownership marks: every Profile and NetworkPolicy the controllers write
// carries OwnerAnnotation; only such objects are ever updated or deleted
// by them, so what operators write through routedctl is never touched.
// SourceAnnotation names the Kubernetes object it was made from
// ("<namespace>/<name>" or "<name>"), which the resync uses to remove
// what was written for objects deleted while no controller ran.
const (
	OwnerAnnotation  = "routed.io/owner"
	OwnerValue       = "routed-controllers"
	SourceAnnotation = api.KubernetesSourceAnnotation
)

// Calico's prefixes for namespace and service-account labels on their
// profiles, and the label carrying the object's own name.
const (
	NamespaceLabelPrefix      = "pcns."
	ServiceAccountLabelPrefix = "pcsa."
	NameLabel                 = "projectcalico.org/name"
)

// PolicyNamePrefix starts the name of every NetworkPolicy converted from
// a Kubernetes one (Calico's "knp.default.").
const PolicyNamePrefix = api.KubernetesNetworkPolicyPrefix

// PolicyOrder is the order of converted policies in the default tier
// (Calico's 1000).
const PolicyOrder = 1000.0

func owned(meta *api.ObjectMeta, source string) {
	meta.Annotations = map[string]string{OwnerAnnotation: OwnerValue, SourceAnnotation: source}
}

// IsOwned reports whether the controllers wrote r.
func IsOwned(r api.Resource) bool { return r.Meta().Annotations[OwnerAnnotation] == OwnerValue }

// NamespaceProfile is the Profile "kns.<ns>" of a namespace: its labels
// prefixed "pcns." plus pcns.projectcalico.org/name, and rules that
// allow everything (what applies while no policy selects a pod).
func NamespaceProfile(ns *corev1.Namespace) *api.Profile {
	labels := map[string]string{NamespaceLabelPrefix + NameLabel: ns.Name}
	for k, v := range ns.Labels {
		labels[NamespaceLabelPrefix+k] = v
	}
	p := &api.Profile{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
		Metadata: api.ObjectMeta{Name: api.NamespaceProfilePrefix + ns.Name},
		Spec: api.ProfileSpec{
			Ingress:       []api.Rule{{Action: api.ActionAllow}},
			Egress:        []api.Rule{{Action: api.ActionAllow}},
			LabelsToApply: labels,
		},
	}
	owned(&p.Metadata, ns.Name)
	return p
}

// ServiceAccountProfileName is "ksa.<namespace>.<name>".
func ServiceAccountProfileName(namespace, name string) string {
	return api.ServiceAccountProfilePrefix + namespace + "." + name
}

// ServiceAccountProfile is the Profile "ksa.<ns>.<name>" of a service
// account: its labels prefixed "pcsa." plus pcsa.projectcalico.org/name,
// and no rules (Calico's).
func ServiceAccountProfile(sa *corev1.ServiceAccount) *api.Profile {
	labels := map[string]string{ServiceAccountLabelPrefix + NameLabel: sa.Name}
	for k, v := range sa.Labels {
		labels[ServiceAccountLabelPrefix+k] = v
	}
	p := &api.Profile{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
		Metadata: api.ObjectMeta{Name: ServiceAccountProfileName(sa.Namespace, sa.Name)},
		Spec:     api.ProfileSpec{LabelsToApply: labels},
	}
	owned(&p.Metadata, sa.Namespace+"/"+sa.Name)
	return p
}

// selectorFor writes a Kubernetes label selector as a routed selector.
// A pod selector always also requires the k8s orchestrator label, so it
// never picks network sets or non-Kubernetes workloads. For a namespace
// selector, nil is "" (the policy's own namespace) and empty is all().
func selectorFor(s *metav1.LabelSelector, pods bool) string {
	var terms []string
	if pods {
		terms = append(terms, fmt.Sprintf("%s == 'k8s'", api.LabelOrchestrator))
	}
	if s == nil {
		return strings.Join(terms, " && ")
	}
	if !pods && len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return "all()"
	}
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		terms = append(terms, fmt.Sprintf("%s == '%s'", k, s.MatchLabels[k]))
	}
	for _, e := range s.MatchExpressions {
		values := "'" + strings.Join(e.Values, "', '") + "'"
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			terms = append(terms, fmt.Sprintf("%s in { %s }", e.Key, values))
		case metav1.LabelSelectorOpNotIn:
			terms = append(terms, fmt.Sprintf("%s not in { %s }", e.Key, values))
		case metav1.LabelSelectorOpExists:
			terms = append(terms, fmt.Sprintf("has(%s)", e.Key))
		case metav1.LabelSelectorOpDoesNotExist:
			terms = append(terms, fmt.Sprintf("! has(%s)", e.Key))
		default:
			// The API server refuses other operators; match nothing
			// rather than more than was asked.
			terms = append(terms, fmt.Sprintf("has(%s) && ! has(%s)", e.Key, e.Key))
		}
	}
	return strings.Join(terms, " && ")
}

// PodEndpoint returns wep with what the pod says about it, exactly as
// the CNI plugin writes it at ADD: the pod's labels plus Calico's
// identity labels, the namespace and service account profiles
// (api.PodIdentity), the service account and the named or host-mapped
// container ports (api.ContainerPort).
// changed is false when wep already says all that.
func PodEndpoint(wep *api.WorkloadEndpoint, pod *corev1.Pod) (out *api.WorkloadEndpoint, changed bool) {
	sa := pod.Spec.ServiceAccountName
	labels, profiles := api.PodIdentity(pod.Namespace, sa, pod.Labels)
	var ports []api.WorkloadEndpointPort
	for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
		for _, p := range c.Ports {
			if wp, ok := api.ContainerPort(p.Name, int(p.ContainerPort), string(p.Protocol), int(p.HostPort), p.HostIP); ok {
				ports = append(ports, wp)
			}
		}
	}
	s := &wep.Spec
	if maps.Equal(wep.Metadata.Labels, labels) && slices.Equal(s.Profiles, profiles) && s.ServiceAccountName == sa &&
		slices.EqualFunc(s.Ports, ports, func(a, b api.WorkloadEndpointPort) bool { return a == b }) {
		return wep, false
	}
	cp := *wep
	cp.Metadata.Labels = labels
	cp.Spec.Profiles = profiles
	cp.Spec.ServiceAccountName = sa
	cp.Spec.Ports = ports
	return &cp, true
}

// simplifyPorts merges numeric ports and ranges that overlap or touch
// into ranges, sorted, then the named ports in their first order, each
// once (Calico's SimplifyPorts does the same).
func simplifyPorts(ports []api.Port) []api.Port {
	var nums, out []api.Port
	seen := map[string]bool{}
	var named []api.Port
	for _, p := range ports {
		if p.PortName != "" {
			if !seen[p.PortName] {
				seen[p.PortName] = true
				named = append(named, p)
			}
			continue
		}
		nums = append(nums, p)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i].MinPort < nums[j].MinPort })
	for _, p := range nums {
		if n := len(out); n > 0 && int(p.MinPort) <= int(out[n-1].MaxPort)+1 {
			out[n-1].MaxPort = max(out[n-1].MaxPort, p.MaxPort)
			continue
		}
		out = append(out, p)
	}
	return append(out, named...)
}

// hashedName shortens a name that is too long to store with its prefix,
// keeping it unique: its start and a hash of the whole.
func hashedName(name string) string {
	sum := sha256.Sum256([]byte(name))
	keep := min(len(name), 200)
	return strings.TrimRight(name[:keep], ".-") + "-" + hex.EncodeToString(sum[:6])
}
