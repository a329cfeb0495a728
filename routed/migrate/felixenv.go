package migrate

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/routed-net/routed/pkg/api"
)

// Calico's felix takes its configuration from calico-node's FELIX_*
// environment variables over FelixConfiguration "node.<name>" over
// FelixConfiguration "default", and falls back to its own defaults. Two
// of those decide what pods and hosts may reach, and routed reads
// neither the environment nor Calico's default:
// defaultEndpointToHostAction (felix's default is Drop; Calico's
// manifests and operator set FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT;
// on etcd calico-node's start writes node.<name> with Return) and the
// failsafe ports. The migration takes the effective value: environment,
// else each FelixConfiguration's own, else Drop.
//
// routed's verdict on a pod's traffic to its host is Calico's Return:
// once the pod's egress policy allows it, routed accepts in its own
// table's input base chain, and an nftables accept ends only that base
// chain: the host's own rules on the input hook (another nftables
// table, iptables-nft's filter INPUT, iptables-legacy) still see the
// packet and may drop it, as Calico's RETURN hands it back to the
// host's INPUT chain (TestEndpointToHostIsReturn, felix/policy, proves
// it on a real kernel). Calico's Accept skips the host's iptables INPUT
// rules after its own; routed never does, so it is no looser than
// Accept either. Only Drop is lost: routed would accept what felix
// dropped.
const (
	envEndpointToHost   = "FELIX_DEFAULTENDPOINTTOHOSTACTION"
	envFailsafeInbound  = "FELIX_FAILSAFEINBOUNDHOSTPORTS"
	envFailsafeOutbound = "FELIX_FAILSAFEOUTBOUNDHOSTPORTS"
	calicoNodeContainer = "calico-node"
	endpointToHostField = "defaultEndpointToHostAction"
	endpointToHostAllow = "pods would reach their host where Calico stopped them: routed accepts a pod's traffic to its host once the pod's egress policy allows it and leaves it to the host's own firewall (Calico's Return)"
)

// endpointToHostLost reports whether routed would accept what felix
// stops under defaultEndpointToHostAction v (set: not empty): anything
// but Accept and Return (Drop; felix refuses to start on other values).
func endpointToHostLost(v string) bool {
	return !strings.EqualFold(v, "Accept") && !strings.EqualFold(v, "Return")
}

// wireguardEnv are calico-node's variables that turn WireGuard on, and
// the FelixConfiguration fields routed reads for the same (routed
// encrypts only as FelixConfiguration "default" or its own flags say).
// A cluster Calico encrypted through the environment alone would cross
// the network in clear after the switch: a loss, which refuses the run.
var wireguardEnv = []struct{ env, field string }{
	{"FELIX_WIREGUARDENABLED", "wireguardEnabled"},
	{"FELIX_WIREGUARDENABLEDV6", "wireguardEnabledV6"},
	{"FELIX_WIREGUARDHOSTENCRYPTIONENABLED", "wireguardHostEncryptionEnabled"},
}

// wireguardClear is the consequence of a WireGuard setting routed does
// not read, and its remedy.
func wireguardClear(field string) string {
	return fmt.Sprintf(`traffic Calico encrypted with WireGuard would cross the network in clear under routed: set %s: true in FelixConfiguration "default" (kubectl patch felixconfigurations.crd.projectcalico.org default --type merge -p '{"spec":{"%s":true}}', or calicoctl patch) and run the migration again`, field, field)
}

// calicoNodeNamespaces are where Calico's manifests (kube-system) and
// its operator (calico-system) run calico-node.
var calicoNodeNamespaces = []string{"kube-system", "calico-system"}

// felixSeen is what the FelixConfigurations read set for
// defaultEndpointToHostAction, by name ("" when unset), and which of
// the wireguardEnv fields they set true, by name.
type felixSeen struct {
	endpointToHost map[string]string
	wireguard      map[string]map[string]bool
}

// saw records a FelixConfiguration read (obj as read); other kinds are
// ignored.
func (f *felixSeen) saw(k api.Kind, obj map[string]any) {
	if k != api.KindFelixConfiguration {
		return
	}
	md, _ := obj["metadata"].(map[string]any)
	spec, _ := obj["spec"].(map[string]any)
	name, _ := md["name"].(string)
	v, _ := spec[endpointToHostField].(string)
	if f.endpointToHost == nil {
		f.endpointToHost = map[string]string{}
		f.wireguard = map[string]map[string]bool{}
	}
	f.endpointToHost[name] = v
	on := map[string]bool{}
	for _, w := range wireguardEnv {
		on[w.field], _ = spec[w.field].(bool)
	}
	f.wireguard[name] = on
}

// calicoNodeEnv is the environment of one calico-node container: the
// variables set to a value, and those set from elsewhere (valueFrom,
// envFrom) that the migration cannot resolve.
type calicoNodeEnv struct {
	where   string // "DaemonSet <namespace>/<name>"
	vars    map[string]string
	unknown map[string]bool
	envFrom bool
}

// lookup is the value of name: set says it is set to value; known is
// false when it may be set from where the migration does not read.
func (e calicoNodeEnv) lookup(name string) (value string, set, known bool) {
	if v, ok := e.vars[name]; ok {
		return v, true, true
	}
	if e.unknown[name] || e.envFrom {
		return "", false, false
	}
	return "", false, true
}

// felixEnv reads calico-node's environment from its DaemonSets and
// records what it leaves unenforced (checkFelixEnv). A DaemonSet that
// cannot be found or read is a warning: the environment was not checked.
func (s *kubeSource) felixEnv(ctx context.Context, st *calicoState) error {
	var envs []calicoNodeEnv
	var errs []string
	for _, ns := range calicoNodeNamespaces {
		dss, err := s.kube.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Sprintf("listing DaemonSets in %s: %v", ns, err))
			continue
		}
		for i := range dss.Items {
			if e, ok := nodeEnv(&dss.Items[i]); ok {
				envs = append(envs, e)
			}
		}
	}
	if len(envs) == 0 {
		why := fmt.Sprintf("no DaemonSet in %s runs a container named %s", strings.Join(calicoNodeNamespaces, " or "), calicoNodeContainer)
		if len(errs) > 0 {
			why = strings.Join(errs, "; ")
		}
		st.checkFelixEnv(nil, why)
		return nil
	}
	if len(errs) > 0 {
		st.warnings = append(st.warnings, fmt.Sprintf("calico-node's environment was checked only in %s: %s", envs[0].where, strings.Join(errs, "; ")))
	}
	st.checkFelixEnv(envs, "")
	return nil
}

// nodeEnv is the environment of ds's calico-node container, if it has one.
func nodeEnv(ds *appsv1.DaemonSet) (calicoNodeEnv, bool) {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != calicoNodeContainer {
			continue
		}
		e := calicoNodeEnv{where: fmt.Sprintf("DaemonSet %s/%s", ds.Namespace, ds.Name), vars: map[string]string{}, unknown: map[string]bool{},
			envFrom: len(c.EnvFrom) > 0}
		for _, v := range c.Env {
			setVar(e, v)
		}
		return e, true
	}
	return calicoNodeEnv{}, false
}

// setVar records v; a later definition of a name wins, as in the kubelet.
func setVar(e calicoNodeEnv, v corev1.EnvVar) {
	if v.ValueFrom != nil {
		delete(e.vars, v.Name)
		e.unknown[v.Name] = true
		return
	}
	delete(e.unknown, v.Name)
	e.vars[v.Name] = v.Value
}

// checkFelixEnv records what calico-node's environment (envs; nil when
// it was not checked, notChecked saying why) and the FelixConfigurations
// seen leave unenforced in routed: a loss for each effective
// defaultEndpointToHostAction routed loosens (endpointToHostLost),
// whether the environment sets it, or, where the environment leaves it
// unset or was not read, a FelixConfiguration ("default" or
// "node.<name>") does, or nothing does (Calico's Drop; a warning when
// the environment was not read); a loss for each environment setting
// failsafe ports (routed reads only FelixConfigurations), a warning for
// what could not be checked.
func (st *calicoState) checkFelixEnv(envs []calicoNodeEnv, notChecked string) {
	fcValue := st.felix.endpointToHost["default"]
	if envs == nil {
		w := fmt.Sprintf("calico-node's environment was not checked (%s). Its FELIX_* variables override every FelixConfiguration; routed reads no environment of Calico's. Check %s, %s and %s in calico-node's DaemonSet before switching: failsafe ports set there are replaced by routed's defaults",
			notChecked, envEndpointToHost, envFailsafeInbound, envFailsafeOutbound)
		if fcValue == "" {
			w += fmt.Sprintf(`, and as no FelixConfiguration "default" sets %s, Calico's felix drops pods' traffic to their host (its default, Drop) on nodes no FelixConfiguration "node.<name>" sets it for, unless %s says otherwise (Calico's manifests and operator set ACCEPT): if it is unset or DROP, %s`,
				endpointToHostField, envEndpointToHost, endpointToHostAllow)
		}
		w += fmt.Sprintf(". WireGuard turned on there (%s, %s or %s) is not carried either: set the same in FelixConfiguration \"default\" before switching, or pod traffic Calico encrypted crosses the network in clear",
			wireguardEnv[0].env, wireguardEnv[1].env, wireguardEnv[2].env)
		st.warnings = append(st.warnings, w)
		st.configuredEndpointToHost(fmt.Sprintf("calico-node's environment, which overrides it, was not read (%s): lost unless it sets %s=ACCEPT or RETURN", notChecked, envEndpointToHost))
		return
	}
	defaultLost, configuredJudged := false, false
	configured := func(why string) {
		if !configuredJudged {
			configuredJudged = true
			st.configuredEndpointToHost(why)
		}
	}
	for _, e := range envs {
		v, set, known := e.lookup(envEndpointToHost)
		switch {
		case !known:
			st.warnings = append(st.warnings, fmt.Sprintf("%s: calico-node's %s comes from a ConfigMap or Secret (valueFrom or envFrom), which the migration does not read; if it is DROP, %s",
				e.where, envEndpointToHost, endpointToHostAllow))
			configured(fmt.Sprintf("%s: calico-node's %s, which overrides it, comes from a ConfigMap or Secret the migration does not read: lost unless it is ACCEPT or RETURN", e.where, envEndpointToHost))
		case set && endpointToHostLost(v):
			st.addLoss(PolicyLoss{Kind: "DaemonSet", Name: strings.TrimPrefix(e.where, "DaemonSet "),
				Reason:      fmt.Sprintf("calico-node's environment sets %s=%s, which overrides every FelixConfiguration; routed reads no environment of Calico's and accepts", envEndpointToHost, v),
				Consequence: endpointToHostAllow})
		case set:
			// ACCEPT or RETURN overrides every FelixConfiguration, and
			// routed does no less.
		default:
			configured(fmt.Sprintf("calico-node's environment (%s) does not set %s, which would override it", e.where, envEndpointToHost))
			if fcValue == "" && !defaultLost {
				defaultLost = true
				st.addLoss(PolicyLoss{Kind: string(api.KindFelixConfiguration), Name: "default",
					Reason: fmt.Sprintf("%s is unset there (or there is no FelixConfiguration default) and calico-node's environment (%s) does not set %s: Calico's felix applies its default, Drop",
						endpointToHostField, e.where, envEndpointToHost),
					Consequence: endpointToHostAllow})
			}
		}
		for _, w := range wireguardEnv {
			v, set, known := e.lookup(w.env)
			on, err := strconv.ParseBool(v)
			switch {
			case st.felix.wireguard["default"][w.field]:
				// routed encrypts as Calico did.
			case !known:
				st.warnings = append(st.warnings, fmt.Sprintf("%s: calico-node's %s comes from a ConfigMap or Secret, which the migration does not read; if it is true, %s",
					e.where, w.env, wireguardClear(w.field)))
			case set && (on || err != nil):
				st.addLoss(PolicyLoss{Kind: "DaemonSet", Name: strings.TrimPrefix(e.where, "DaemonSet "),
					Reason:      fmt.Sprintf(`calico-node's environment sets %s=%q, which routed does not read, and FelixConfiguration "default" does not set %s: true`, w.env, v, w.field),
					Consequence: wireguardClear(w.field)})
			}
		}
		for _, f := range []struct{ env, field string }{{envFailsafeInbound, "failsafeInboundHostPorts"}, {envFailsafeOutbound, "failsafeOutboundHostPorts"}} {
			v, set, known := e.lookup(f.env)
			switch {
			case !known:
				st.warnings = append(st.warnings, fmt.Sprintf("%s: calico-node's %s comes from a ConfigMap or Secret, which the migration does not read; if it is set, %s",
					e.where, f.env, felixPolicyFields[f.field].allows))
			case set:
				st.addLoss(PolicyLoss{Kind: "DaemonSet", Name: strings.TrimPrefix(e.where, "DaemonSet "),
					Reason:      fmt.Sprintf("calico-node's environment sets %s=%q, which overrides every FelixConfiguration; routed reads no environment of Calico's", f.env, v),
					Consequence: felixPolicyFields[f.field].allows})
			}
		}
	}
}

// configuredEndpointToHost records a loss for each FelixConfiguration
// ("default", "node.<name>") setting a defaultEndpointToHostAction
// routed loosens, why saying why the environment does not override it.
func (st *calicoState) configuredEndpointToHost(why string) {
	names := make([]string, 0, len(st.felix.endpointToHost))
	for name, v := range st.felix.endpointToHost {
		if v != "" && endpointToHostLost(v) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		st.addLoss(PolicyLoss{Kind: string(api.KindFelixConfiguration), Name: name,
			Reason:      fmt.Sprintf("%s %q would not apply: %s", endpointToHostField, st.felix.endpointToHost[name], why),
			Consequence: endpointToHostAllow})
	}
}

// addLoss records l, folded into a loss already recorded for the same
// resource.
func (st *calicoState) addLoss(l PolicyLoss) {
	for i := range st.losses {
		if o := &st.losses[i]; o.Kind == l.Kind && o.Name == l.Name {
			o.Reason += "; " + l.Reason
			o.Consequence += "; " + l.Consequence
			return
		}
	}
	st.losses = append(st.losses, l)
}

// etcdUnchecked warns of what Calico in etcd mode enforces from the
// Kubernetes API, which the etcd source cannot read: calico-node's
// environment and the admin network policies.
func (st *calicoState) etcdUnchecked() {
	st.checkFelixEnv(nil, "the etcd source does not read Kubernetes, where calico-node runs")
	st.warnings = append(st.warnings, fmt.Sprintf("AdminNetworkPolicies and BaselineAdminNetworkPolicies were not checked: Calico 3.29 and later enforce them from the Kubernetes API, which the etcd source does not read, and %s. List them (kubectl get adminnetworkpolicies,baselineadminnetworkpolicies) before switching: what their Deny rules stop, routed would allow",
		anpNotWatched))
}
