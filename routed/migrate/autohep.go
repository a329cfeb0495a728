package migrate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// Calico's kube-controllers create host endpoints for Kubernetes nodes
// when their KubeControllersConfiguration "default" says
// spec.controllers.node.hostEndpoint.autoCreate: Enabled: a "*"
// endpoint "<node>-auto-hep" per node (unless createDefaultHostEndpoint
// is Disabled, Calico 3.30 and later), and, from templates, endpoints
// "<node>-<generateName>[-<interface>]-auto-hep". Each is labelled
// projectcalico.org/created-by: calico-kube-controllers.
//
// The migration carries them as they are, unowned: routed-controllers
// with AUTO_HOST_ENDPOINTS=true take a node's "<node>-auto-hep" over
// (controllers.fromCalico), and without it leave it policing its host.
// Marked as routed-controllers' own, they would be removed by
// controllers running with the feature off: a host unpoliced until the
// operator turned it on. Unowned, every order of operations fails
// closed. Templates routed-controllers do not have: each is a policy
// loss.

// kubeControllersConfigs is the plural of Calico's
// KubeControllersConfiguration; calico-kube-controllers read only
// kubeControllersDefault.
const (
	kubeControllersConfigs = "kubecontrollersconfigurations"
	kubeControllersDefault = "default"
)

// autoHEPConfig is what Calico's kube-controllers do about host
// endpoints for nodes, as read from their configuration.
type autoHEPConfig struct {
	// where names the configuration and the part read.
	where      string
	autoCreate bool
	// defaultHEP: a "*" endpoint "<node>-auto-hep" per node.
	defaultHEP bool
	// templates are the templates' generateNames.
	templates []string
}

// readAutoHEPConfig reads a KubeControllersConfiguration (the stored
// object, status included) named where. status.runningConfig, which
// calico-kube-controllers write, is what they run (their environment's
// AUTO_HOST_ENDPOINTS included) and is read when present; else spec.
func readAutoHEPConfig(obj map[string]any, where string) (*autoHEPConfig, error) {
	cfg, part := obj["spec"], "spec"
	if status, ok := obj["status"].(map[string]any); ok {
		if rc, ok := status["runningConfig"].(map[string]any); ok && len(rc) > 0 {
			cfg, part = rc, "status.runningConfig"
		}
	}
	c := &autoHEPConfig{where: where + " (" + part + ")", defaultHEP: true}
	field := part + ".controllers.node.hostEndpoint"
	hep := dig(cfg, "controllers", "node", "hostEndpoint")
	if hep == nil {
		return c, nil
	}
	switch v, _ := hep["autoCreate"].(string); v {
	case "Enabled":
		c.autoCreate = true
	case "", "Disabled":
	default:
		return nil, fmt.Errorf("migrate: %s: %s.autoCreate %q is neither Enabled nor Disabled", where, field, v)
	}
	switch v, _ := hep["createDefaultHostEndpoint"].(string); v {
	case "", "Enabled":
	case "Disabled":
		c.defaultHEP = false
	default:
		return nil, fmt.Errorf("migrate: %s: %s.createDefaultHostEndpoint %q is neither Enabled nor Disabled", where, field, v)
	}
	ts, ok := hep["templates"].([]any)
	if hep["templates"] != nil && !ok {
		return nil, fmt.Errorf("migrate: %s: %s.templates is not a list", where, field)
	}
	for i, t := range ts {
		m, _ := t.(map[string]any)
		name, _ := m["generateName"].(string)
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		c.templates = append(c.templates, name)
	}
	return c, nil
}

// dig follows keys through nested objects; nil where one is missing.
func dig(v any, keys ...string) map[string]any {
	m, _ := v.(map[string]any)
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

// kubeControllersConfig reads Calico's KubeControllersConfigurations
// (objs, by the name each is known by): "default", nil if Calico has
// none; the others are listed as not read.
func (st *calicoState) kubeControllersConfig(objs map[string]map[string]any) (*autoHEPConfig, error) {
	var cfg *autoHEPConfig
	for _, where := range slices.Sorted(maps.Keys(objs)) {
		obj := objs[where]
		name, _ := dig(obj, "metadata")["name"].(string)
		if name != kubeControllersDefault {
			st.skipped = append(st.skipped, fmt.Sprintf("%s: calico-kube-controllers read only %q", where, kubeControllersDefault))
			continue
		}
		c, err := readAutoHEPConfig(obj, where)
		if err != nil {
			return nil, err
		}
		cfg = c
		st.skipped = append(st.skipped, fmt.Sprintf("%s: only controllers.node.hostEndpoint is read (automatic host endpoints); the rest configures Calico's kube-controllers, which routed does not run (routed-controllers take flags of their own)", where))
	}
	return cfg, nil
}

// calicoMade reports whether h is a host endpoint Calico's
// kube-controllers created, and whether it is a node's "*" endpoint
// "<node>-auto-hep" (else one from a template).
func calicoMade(h *api.HostEndpoint) (made, perNode bool) {
	if h.Metadata.Labels[controllers.CalicoCreatedByLabel] != controllers.CalicoCreatedByValue {
		return false, false
	}
	return true, h.Metadata.Name == h.Spec.Node+controllers.AutoHostEndpointSuffix && h.Spec.InterfaceName == api.AllInterfaces
}

// autoHostEndpoints says what becomes of Calico's automatic host
// endpoints (carried in st.resources) under cfg (nil: Calico has no
// configuration, so its kube-controllers create none): what to run for
// routed-controllers to keep them, and the losses. nodes are the
// Kubernetes nodes (nil from etcd, which does not read Kubernetes): an
// endpoint routed-controllers would give other addresses is a loss.
func (st *calicoState) autoHostEndpoints(cfg *autoHEPConfig, nodes map[string]*corev1.Node) {
	var perNode, fromTemplates []*api.HostEndpoint
	for _, r := range st.resources {
		h, ok := r.(*api.HostEndpoint)
		if !ok {
			continue
		}
		switch made, node := calicoMade(h); {
		case made && node:
			perNode = append(perNode, h)
		case made:
			fromTemplates = append(fromTemplates, h)
		}
	}
	if cfg == nil || !cfg.autoCreate {
		where := "Calico has no KubeControllersConfiguration default"
		if cfg != nil {
			where = cfg.where + " has not autoCreate Enabled"
		}
		if n := len(perNode) + len(fromTemplates); n > 0 {
			st.notes = append(st.notes, fmt.Sprintf("automatic host endpoints: %s, so Calico creates none for new nodes; the %d carried that calico-kube-controllers created (%s) keep policing their hosts as written. Keep routed-controllers' AUTO_HOST_ENDPOINTS off to match (on, they would take over the <node>-auto-hep ones and create one per node)",
				where, n, firstNames(heNames(append(perNode, fromTemplates...)))))
		}
		return
	}
	if cfg.defaultHEP {
		st.notes = append(st.notes, fmt.Sprintf("automatic host endpoints: %s has autoCreate Enabled. Run routed-controllers with AUTO_HOST_ENDPOINTS=true before the first node switches "+
			"(in the env of the container controllers of the Deployment routed-controllers, in the manifest you apply (deploy/base/controllers.yaml): `- {name: AUTO_HOST_ENDPOINTS, value: \"true\"}`; "+
			"a `kubectl -n kube-system set env deployment/routed-controllers AUTO_HOST_ENDPOINTS=true` is undone by the next apply of a manifest without it, after which routed-controllers remove the endpoints they took over): "+
			"they then take over the %d carried <node>-auto-hep (%s), follow node labels and addresses, remove a deleted node's and create one for every node added later. "+
			"Until then the carried ones keep policing their hosts as written (routed-controllers never remove them), and a node added later has none",
			cfg.where, len(perNode), firstNames(heNames(perNode))))
		st.takeoverLosses(perNode, nodes)
	} else {
		st.notes = append(st.notes, fmt.Sprintf("automatic host endpoints: %s has createDefaultHostEndpoint Disabled: Calico creates no \"*\" endpoint per node. Keep routed-controllers' AUTO_HOST_ENDPOINTS off (on, they would create one per node)", cfg.where))
	}
	for _, tmpl := range cfg.templates {
		var made []*api.HostEndpoint
		for _, h := range fromTemplates {
			if strings.HasPrefix(h.Metadata.Name, h.Spec.Node+"-"+tmpl+"-") {
				made = append(made, h)
			}
		}
		st.losses = append(st.losses, PolicyLoss{Kind: "KubeControllersConfiguration", Name: kubeControllersDefault,
			Reason: fmt.Sprintf("its host endpoint template %q (%s): routed-controllers create no host endpoints from templates", tmpl, cfg.where),
			Consequence: fmt.Sprintf("the %d endpoints Calico made from it (%s) are carried as if written by hand: they follow no label or address change and stay when their node goes; "+
				"a node added later gets none, so policies selecting them do not police its host", len(made), firstNames(heNames(made)))})
	}
}

// takeoverLosses lists as policy losses the carried <node>-auto-hep
// whose expectedIPs routed-controllers would change on taking them
// over (they give the Kubernetes node's InternalIP and ExternalIP
// addresses; Calico also its tunnel and BGP addresses): policies
// selecting the endpoint would match other addresses. From etcd, where
// the nodes are not read, a warning says what was not checked.
func (st *calicoState) takeoverLosses(perNode []*api.HostEndpoint, nodes map[string]*corev1.Node) {
	if nodes == nil {
		if len(perNode) > 0 {
			st.warnings = append(st.warnings, fmt.Sprintf("the expectedIPs routed-controllers give the %d <node>-auto-hep they take over were not checked (the etcd source does not read Kubernetes): "+
				"they list the node's Kubernetes InternalIP and ExternalIP addresses, Calico also its tunnel and BGP addresses, so policies selecting these endpoints as a source or destination "+
				"would stop matching the addresses only Calico lists. Compare `kubectl get nodes -o wide` with `routedctl get hostendpoint -o yaml`", len(perNode)))
		}
		return
	}
	for _, h := range perNode {
		n := nodes[h.Spec.Node]
		if n == nil {
			continue // its node is gone: routed-controllers remove it, as Calico's would
		}
		want := controllers.AutoHostEndpoint(n).Spec.ExpectedIPs
		lost := slices.DeleteFunc(slices.Clone(h.Spec.ExpectedIPs), func(a string) bool { return slices.Contains(want, a) })
		added := slices.DeleteFunc(slices.Clone(want), func(a string) bool { return slices.Contains(h.Spec.ExpectedIPs, a) })
		if len(lost)+len(added) == 0 {
			continue
		}
		st.losses = append(st.losses, PolicyLoss{Kind: string(api.KindHostEndpoint), Name: h.Metadata.Name,
			Reason: fmt.Sprintf("routed-controllers, taking it over once AUTO_HOST_ENDPOINTS=true, give it expectedIPs %v (the node's InternalIP and ExternalIP addresses), Calico %v",
				want, h.Spec.ExpectedIPs),
			Consequence: fmt.Sprintf("policies selecting it as a source or destination would no longer match %v (traffic a Deny rule denied to or from them would be allowed) and would match %v", lost, added)})
	}
}

func heNames(hs []*api.HostEndpoint) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Metadata.Name
	}
	return out
}

// defaultAllowProfile adds Calico's projectcalico-default-allow when a
// carried endpoint names it and Calico stores none: Calico's datastores
// make it up on reading (it is never stored), and in routed an endpoint
// naming a profile that does not exist is denied everything. It is
// written as routed-controllers write it, so they keep it.
func (st *calicoState) defaultAllowProfile() {
	named := false
	for _, r := range st.resources {
		var profiles []string
		switch x := r.(type) {
		case *api.Profile:
			if x.Metadata.Name == api.DefaultAllowProfile {
				return
			}
		case *api.HostEndpoint:
			profiles = x.Spec.Profiles
		case *api.WorkloadEndpoint:
			profiles = x.Spec.Profiles
		}
		named = named || slices.Contains(profiles, api.DefaultAllowProfile)
	}
	if named {
		st.resources = append(st.resources, controllers.DefaultAllowProfile())
	}
}

// takenOver reports whether routed's cur is routed-controllers' own
// automatic host endpoint in place of Calico's carried r (the
// controllers ran with AUTO_HOST_ENDPOINTS=true before this run): kept
// as it is, which is no conflict.
func takenOver(cur, r api.Resource) bool {
	h, ok := r.(*api.HostEndpoint)
	if !ok || !controllers.IsOwned(cur) {
		return false
	}
	made, perNode := calicoMade(h)
	return made && perNode
}
