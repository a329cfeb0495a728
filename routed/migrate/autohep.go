package migrate

import (
	"encoding/json"
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
// (controllers.fromCalico) unless that would remove a label or an
// expected IP, and without it leave it policing its host. Marked as
// routed-controllers' own, they would be removed by controllers running
// with the feature off: a host unpoliced until the operator turned it
// on. Unowned, every order of operations fails closed; those taken over
// are marked controllers.AdoptedAnnotation and released, not removed,
// when the feature is turned off. Templates routed-controllers do not
// have: each is a policy loss, and so is a <node>-auto-hep whose
// takeover would remove a label or an address (takeoverLosses).

// turnedOff says what routed-controllers already running with
// AUTO_HOST_ENDPOINTS=true do when it is turned off (the plan's items
// say which <node>-auto-hep they already keep).
const turnedOff = "If routed-controllers already run with it on: turned off, they release the <node>-auto-hep they took over from Calico (marked " + controllers.AdoptedAnnotation +
	"; these stay, policing as last written, following their nodes no more) and remove those they created themselves (hosts Calico made none for lose theirs)"

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
	if status, ok := obj["status"].(map[string]any); ok {
		if rc, ok := status["runningConfig"].(map[string]any); ok && len(rc) > 0 {
			return parseAutoHEPConfig(rc, where, "status.runningConfig")
		}
	}
	return parseAutoHEPConfig(obj["spec"], where, "spec")
}

// specDisagrees says, when obj's spec and status.runningConfig (what
// calico-kube-controllers run, c) set host endpoints differently, what
// each says: calico-kube-controllers' environment (AUTO_HOST_ENDPOINTS)
// overrides the spec, and a restart without it would go back to the
// spec. "" when they agree or there is no runningConfig.
func specDisagrees(obj map[string]any, where string, c *autoHEPConfig) string {
	if !strings.HasSuffix(c.where, "(status.runningConfig)") {
		return ""
	}
	spec, err := parseAutoHEPConfig(obj["spec"], where, "spec")
	if err != nil {
		return fmt.Sprintf("%s: status.runningConfig (what calico-kube-controllers run) sets host endpoints to %s, and spec cannot be read: %v; what they run was read", where, c.settings(), err)
	}
	if spec.settings() == c.settings() {
		return ""
	}
	return fmt.Sprintf("%s: spec sets host endpoints to %s, status.runningConfig (what calico-kube-controllers run, their environment such as AUTO_HOST_ENDPOINTS overriding the spec) to %s; "+
		"what they run was read. Calico restarted without that environment would follow the spec: check which you mean before choosing routed-controllers' AUTO_HOST_ENDPOINTS", where, spec.settings(), c.settings())
}

// settings names what c sets.
func (c *autoHEPConfig) settings() string {
	on := func(b bool) string {
		if b {
			return "Enabled"
		}
		return "Disabled"
	}
	return fmt.Sprintf("autoCreate %s, createDefaultHostEndpoint %s, templates %v", on(c.autoCreate), on(c.defaultHEP), c.templates)
}

// parseAutoHEPConfig reads part (spec or status.runningConfig) of the
// KubeControllersConfiguration where.
func parseAutoHEPConfig(cfg any, where, part string) (*autoHEPConfig, error) {
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
		if w := specDisagrees(obj, where, c); w != "" {
			st.warnings = append(st.warnings, w)
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
			st.notes = append(st.notes, fmt.Sprintf("automatic host endpoints: %s, so Calico creates none for new nodes; the %d carried that calico-kube-controllers created (%s) keep policing their hosts as written. Keep routed-controllers' AUTO_HOST_ENDPOINTS off to match (on, they would take over the <node>-auto-hep ones and create one per node). %s",
				where, n, firstNames(heNames(append(perNode, fromTemplates...))), turnedOff))
		}
		return
	}
	if cfg.defaultHEP {
		st.notes = append(st.notes, fmt.Sprintf("automatic host endpoints: %s has autoCreate Enabled. Run routed-controllers with AUTO_HOST_ENDPOINTS=true before the first node switches "+
			"(in the env of the container controllers of the Deployment routed-controllers, in the manifest you apply (deploy/base/controllers.yaml): `- {name: AUTO_HOST_ENDPOINTS, value: \"true\"}`; "+
			"a `kubectl -n kube-system set env deployment/routed-controllers AUTO_HOST_ENDPOINTS=true` is undone by the next apply of a manifest without it, after which routed-controllers "+
			"release the endpoints they took over, which stay, policing as last written but following their nodes no more, and remove those they created for nodes added since): "+
			"they then take over the %d carried <node>-auto-hep (%s), but not one whose takeover would remove a label or an expected IP (listed as policy losses; it keeps policing as Calico wrote it), "+
			"follow node labels and addresses, remove a deleted node's and create one for every node added later. "+
			"Until then the carried ones keep policing their hosts as written (routed-controllers never remove them), and a node added later has none",
			cfg.where, len(perNode), firstNames(heNames(perNode))))
		st.takeoverLosses(perNode, nodes)
	} else {
		st.notes = append(st.notes, fmt.Sprintf("automatic host endpoints: %s has createDefaultHostEndpoint Disabled: Calico creates no \"*\" endpoint per node. Keep routed-controllers' AUTO_HOST_ENDPOINTS off (on, they would create one per node). %s", cfg.where, turnedOff))
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
// routed-controllers would change on taking them over: labels they
// would remove or change (they write the Kubernetes Node's labels; from
// etcd, Calico's may also hold the Calico Node's own, as `calicoctl
// label node` sets them), which they refuse, leaving the endpoint as
// written, and expectedIPs (they give the Kubernetes node's InternalIP
// and ExternalIP addresses; Calico also its tunnel and BGP addresses):
// dropping one they refuse too, adding one widens what policies
// matching the endpoint match. nodes are the Kubernetes nodes, nil from
// etcd: there the labels are compared with the Calico Node's record of
// its Kubernetes labels (projectcalico.org/kube-labels) where it has
// one, and warnings say what could not be checked.
func (st *calicoState) takeoverLosses(perNode []*api.HostEndpoint, nodes map[string]*corev1.Node) {
	if nodes == nil {
		st.etcdTakeoverLosses(perNode)
		return
	}
	for _, h := range perNode {
		n := nodes[h.Spec.Node]
		if n == nil {
			continue // its node is gone: routed-controllers remove it, as Calico's would
		}
		want := controllers.AutoHostEndpoint(n)
		lost := controllers.TakeoverLosses(h, want)
		added := slices.DeleteFunc(slices.Clone(want.Spec.ExpectedIPs), func(a string) bool { return slices.Contains(h.Spec.ExpectedIPs, a) })
		if len(lost.Labels) > 0 {
			st.losses = append(st.losses, labelLoss(h, lost.Labels, "the Kubernetes Node "+n.Name+"'s labels"))
		}
		if len(lost.ExpectedIPs)+len(added) == 0 {
			continue
		}
		l := PolicyLoss{Kind: string(api.KindHostEndpoint), Name: h.Metadata.Name,
			Reason: fmt.Sprintf("routed-controllers with AUTO_HOST_ENDPOINTS=true would give it expectedIPs %v (the node's InternalIP and ExternalIP addresses), Calico %v",
				want.Spec.ExpectedIPs, h.Spec.ExpectedIPs)}
		if len(lost.ExpectedIPs) > 0 {
			l.Consequence = fmt.Sprintf("routed-controllers do not take it over, as that would drop %v: it keeps policing as Calico wrote it but follows no change of its node's labels or addresses "+
				"(and a node added later gets no endpoint unless the feature is on)", lost.ExpectedIPs)
		} else {
			l.Consequence = fmt.Sprintf("taken over, policies selecting it as a source or destination would also match %v (traffic an Allow rule allows to or from it would be allowed to or from them too)", added)
		}
		st.losses = append(st.losses, l)
	}
}

// labelLoss is the policy loss of Calico's endpoint h, whose takeover
// would remove labels (routed-controllers write them from what).
func labelLoss(h *api.HostEndpoint, labels []string, what string) PolicyLoss {
	return PolicyLoss{Kind: string(api.KindHostEndpoint), Name: h.Metadata.Name,
		Reason: fmt.Sprintf("its labels %s are not among %s, which routed-controllers with AUTO_HOST_ENDPOINTS=true write on it: taking it over would remove them",
			strings.Join(labels, ", "), what),
		Consequence: "routed-controllers do not take it over (removing them would un-select the host from the policies selecting it by them): it keeps policing as Calico wrote it, " +
			"but follows no change of its node's labels or addresses. Give the Kubernetes node those labels (kubectl label node " + h.Spec.Node + " key=value) and they take it over"}
}

// kubeLabelsAnnotation is where Calico's kube-controllers (etcd
// datastore) record, on a Calico Node, the labels they copied from its
// Kubernetes node (JSON).
const kubeLabelsAnnotation = "projectcalico.org/kube-labels"

// etcdTakeoverLosses is takeoverLosses from etcd, which does not read
// Kubernetes: an endpoint's labels are compared with its Calico Node's
// kube-labels (the Kubernetes labels routed-controllers would write),
// and where that is missing a warning says they could not be checked.
func (st *calicoState) etcdTakeoverLosses(perNode []*api.HostEndpoint) {
	if len(perNode) == 0 {
		return
	}
	st.warnings = append(st.warnings, fmt.Sprintf("the expectedIPs routed-controllers give the %d <node>-auto-hep they take over were not checked (the etcd source does not read Kubernetes): "+
		"they list the node's Kubernetes InternalIP and ExternalIP addresses, Calico also its tunnel and BGP addresses; routed-controllers do not take over one that would lose an address "+
		"(it keeps policing as Calico wrote it, following its node no more). Compare `kubectl get nodes -o wide` with `routedctl get hostendpoint -o yaml`", len(perNode)))
	calicoNodes := map[string]*api.Node{}
	for _, r := range st.resources {
		if n, ok := r.(*api.Node); ok {
			calicoNodes[n.Metadata.Name] = n
		}
	}
	var unchecked []string
	for _, h := range perNode {
		n := calicoNodes[h.Spec.Node]
		raw, ok := "", false
		if n != nil {
			raw, ok = n.Metadata.Annotations[kubeLabelsAnnotation]
		}
		var kube map[string]string
		if !ok || json.Unmarshal([]byte(raw), &kube) != nil {
			unchecked = append(unchecked, h.Metadata.Name)
			continue
		}
		want := maps.Clone(kube)
		if want == nil {
			want = map[string]string{}
		}
		want[controllers.CalicoCreatedByLabel] = controllers.CalicoCreatedByValue
		if lost := controllers.LabelLosses(h.Metadata.Labels, want); len(lost) > 0 {
			st.losses = append(st.losses, labelLoss(h, lost, "the Kubernetes labels Calico recorded on its Calico Node "+n.Metadata.Name+" ("+kubeLabelsAnnotation+")"))
		}
	}
	if len(unchecked) > 0 {
		st.warnings = append(st.warnings, fmt.Sprintf("the labels of %d <node>-auto-hep (%s) could not be checked: their Calico Node is missing or has no readable %s annotation, "+
			"so which of their labels came from Kubernetes is unknown. routed-controllers write the Kubernetes node's labels and do not take over an endpoint that would lose one "+
			"(it keeps policing as Calico wrote it, following its node no more); compare `kubectl get node <node> --show-labels` with the endpoint's labels",
			len(unchecked), firstNames(unchecked), kubeLabelsAnnotation))
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

// takenOverDetail says, for a carried <node>-auto-hep routed-controllers
// already keep (takenOver), what turning AUTO_HOST_ENDPOINTS off does.
func takenOverDetail(cur api.Resource) string {
	if cur.Meta().Annotations[controllers.AdoptedAnnotation] != "" {
		return "routed-controllers keep it (AUTO_HOST_ENDPOINTS=true; taken over from Calico): turned off, they release it, and it stays, policing as last written"
	}
	return "routed-controllers keep it (AUTO_HOST_ENDPOINTS=true; created by them, or taken over before " + controllers.AdoptedAnnotation +
		" marked those): turned off, they remove it, and its host has no such endpoint until the migration runs again (which carries Calico's, if Calico still has it)"
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
