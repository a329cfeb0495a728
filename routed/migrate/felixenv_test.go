package migrate

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
)

func calicoNodeDS(ns string, env ...corev1.EnvVar) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "calico-node"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "install-cni"}},
			Containers:     []corev1.Container{{Name: "calico-node", Env: env}}}}}}
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// TestFelixEnvironmentDecidesEndpointToHost: from the Kubernetes
// source, the effective defaultEndpointToHostAction is calico-node's
// FELIX_DEFAULTENDPOINTTOHOSTACTION over FelixConfiguration "default"
// over Calico's own default, Drop; Drop is a policy loss (routed
// accepts), named after where it comes from; Accept and Return are not
// (routed's accept is Calico's Return: TestEndpointToHostIsReturn). Failsafe ports set
// in the environment are losses too (routed reads only
// FelixConfigurations). What cannot be read (no calico-node DaemonSet,
// listing forbidden, a value from a ConfigMap) is a warning saying
// what was not checked. WireGuard turned on in the environment and not
// in FelixConfiguration "default" is a loss too: routed would send in
// clear what Calico encrypted.
func TestFelixEnvironmentDecidesEndpointToHost(t *testing.T) {
	fc := func(spec map[string]any) *unstructured.Unstructured {
		return object(calicoCRDv1, "FelixConfiguration", "default", spec)
	}
	accept := map[string]any{"defaultEndpointToHostAction": "Accept"}
	for _, tc := range []struct {
		name      string
		fc        *unstructured.Unstructured
		ds        []runtime.Object
		forbidden bool
		loss      string // "<kind> <name>" and a word of its reason, or ""
		word      string
		warn      string
	}{
		{"manifest ACCEPT, unset", fc(map[string]any{}), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"))}, false, "", "", ""},
		{"operator ACCEPT, no FelixConfiguration", nil, []runtime.Object{calicoNodeDS("calico-system", env(envEndpointToHost, "Accept"))}, false, "", "", ""},
		{"unset everywhere", fc(map[string]any{"logSeverityScreen": "Info"}), []runtime.Object{calicoNodeDS("kube-system", env("FELIX_LOGSEVERITYSCREEN", "info"))}, false,
			"FelixConfiguration default", "its default, Drop", ""},
		{"no FelixConfiguration, no variable", nil, []runtime.Object{calicoNodeDS("kube-system")}, false, "FelixConfiguration default", "its default, Drop", ""},
		{"FelixConfiguration Accept", fc(accept), []runtime.Object{calicoNodeDS("kube-system")}, false, "", "", ""},
		{"environment DROP over Accept", fc(accept), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "DROP"))}, false,
			"DaemonSet kube-system/calico-node", "FELIX_DEFAULTENDPOINTTOHOSTACTION=DROP", ""},
		{"environment RETURN, operator", fc(accept), []runtime.Object{calicoNodeDS("calico-system", env(envEndpointToHost, "RETURN"))}, false, "", "", ""},
		{"environment ACCEPT over Drop", fc(map[string]any{"defaultEndpointToHostAction": "Drop"}), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"))}, false, "", "", ""},
		{"FelixConfiguration Drop", fc(map[string]any{"defaultEndpointToHostAction": "Drop"}), []runtime.Object{calicoNodeDS("kube-system")}, false,
			"FelixConfiguration default", `"Drop" would not apply`, ""},
		{"FelixConfiguration Return", fc(map[string]any{"defaultEndpointToHostAction": "Return"}), []runtime.Object{calicoNodeDS("kube-system")}, false, "", "", ""},
		{"failsafe ports in the environment", fc(accept), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"), env(envFailsafeInbound, "tcp:22"))}, false,
			"DaemonSet kube-system/calico-node", "FELIX_FAILSAFEINBOUNDHOSTPORTS", ""},
		{"from a ConfigMap", fc(map[string]any{}), []runtime.Object{calicoNodeDS("kube-system", corev1.EnvVar{Name: envEndpointToHost,
			ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "x"}}})}, false, "", "", "comes from a ConfigMap"},
		{"no calico-node", fc(map[string]any{}), []runtime.Object{&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"}}}, false,
			"", "", "was not checked (no DaemonSet"},
		{"forbidden", fc(accept), nil, true, "", "", "was not checked (listing DaemonSets in kube-system"},
		// WireGuard turned on only in the environment would end in clear
		// text: a loss; carried by FelixConfiguration "default": nothing.
		{"WireGuard in the environment only", fc(accept), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"), env("FELIX_WIREGUARDENABLED", "true"))}, false,
			"DaemonSet kube-system/calico-node", "FELIX_WIREGUARDENABLED=\"true\"", ""},
		{"WireGuard in the environment and the FelixConfiguration", fc(map[string]any{"defaultEndpointToHostAction": "Accept", "wireguardEnabled": true}),
			[]runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"), env("FELIX_WIREGUARDENABLED", "true"))}, false, "", "", ""},
		{"WireGuard off in the environment", fc(accept), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"), env("FELIX_WIREGUARDENABLED", "false"))}, false, "", "", ""},
		{"WireGuard IPv6 only in the environment", fc(map[string]any{"defaultEndpointToHostAction": "Accept", "wireguardEnabled": true}),
			[]runtime.Object{calicoNodeDS("calico-system", env(envEndpointToHost, "ACCEPT"), env("FELIX_WIREGUARDENABLED", "true"), env("FELIX_WIREGUARDENABLEDV6", "True"))}, false,
			"DaemonSet calico-system/calico-node", "FELIX_WIREGUARDENABLEDV6=\"True\"", ""},
		{"WireGuard not a boolean", fc(accept), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"), env("FELIX_WIREGUARDHOSTENCRYPTIONENABLED", "yes"))}, false,
			"DaemonSet kube-system/calico-node", "FELIX_WIREGUARDHOSTENCRYPTIONENABLED=\"yes\"", ""},
		{"WireGuard host encryption from a ConfigMap", fc(accept), []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"), corev1.EnvVar{Name: "FELIX_WIREGUARDHOSTENCRYPTIONENABLED",
			ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "x"}}})}, false, "", "", "FELIX_WIREGUARDHOSTENCRYPTIONENABLED comes from a ConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeCluster{gv: calicoCRDv1, kube: tc.ds}
			if tc.fc != nil {
				c.objs = []*unstructured.Unstructured{tc.fc}
			}
			src, _, cs := c.source()
			if tc.forbidden {
				cs.PrependReactor("list", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "", nil)
				})
			}
			st, err := src.read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := lossNames(st.losses)
			if tc.loss == "" && len(got) != 0 {
				t.Errorf("losses %v, want none", st.losses)
			}
			if tc.loss != "" {
				l, ok := got[tc.loss]
				if !ok || len(got) != 1 || !strings.Contains(l.Reason, tc.word) || l.Consequence == "" {
					t.Errorf("losses %v, want only %s saying %q", st.losses, tc.loss, tc.word)
				}
			}
			warned := false
			for _, w := range st.warnings {
				warned = warned || tc.warn != "" && strings.Contains(w, tc.warn)
			}
			if tc.warn != "" && !warned {
				t.Errorf("warnings %q, want one saying %q", st.warnings, tc.warn)
			}
			if tc.warn == "" && len(st.warnings) != 0 {
				t.Errorf("warnings %q, want none", st.warnings)
			}
		})
	}
}

// TestFelixEnvironmentOverridesNodeConfigs: calico-node's environment
// overrides FelixConfiguration "node.<name>" as it does "default"
// (felix: environment, then the node's, then the global one). A node's
// Return, which calico-node's start writes on etcd, is not a loss with
// the manifests' ACCEPT or with nothing in the environment (routed does
// what Return does); a node's Drop is, unless the environment says
// ACCEPT, named after that node's FelixConfiguration; "default" is
// judged as before.
func TestFelixEnvironmentOverridesNodeConfigs(t *testing.T) {
	fc := func(name, action string) *unstructured.Unstructured {
		spec := map[string]any{}
		if action != "" {
			spec["defaultEndpointToHostAction"] = action
		}
		return object(calicoCRDv1, "FelixConfiguration", name, spec)
	}
	manifest := []runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "ACCEPT"))}
	unset := []runtime.Object{calicoNodeDS("kube-system")}
	for _, tc := range []struct {
		name  string
		objs  []*unstructured.Unstructured
		ds    []runtime.Object
		want  map[string]string // loss "<kind> <name>": a word of its reason
		warns string
	}{
		{"node Return, environment ACCEPT", []*unstructured.Unstructured{fc("default", ""), fc("node.rm1-n1", "Return"), fc("node.rm1-n2", "Return")}, manifest, nil, ""},
		{"node Return, environment unset, default Accept", []*unstructured.Unstructured{fc("default", "Accept"), fc("node.rm1-n1", "Return")}, unset, nil, ""},
		{"node Return, environment unset, default unset", []*unstructured.Unstructured{fc("default", ""), fc("node.rm1-n1", "Return")}, unset,
			map[string]string{"FelixConfiguration default": "its default, Drop"}, ""},
		{"node Drop, environment ACCEPT", []*unstructured.Unstructured{fc("default", ""), fc("node.rm1-n1", "Drop")}, manifest, nil, ""},
		{"node Drop, environment RETURN", []*unstructured.Unstructured{fc("default", ""), fc("node.rm1-n1", "Drop")},
			[]runtime.Object{calicoNodeDS("calico-system", env(envEndpointToHost, "RETURN"))}, nil, ""},
		{"node Drop, environment unset", []*unstructured.Unstructured{fc("default", "Accept"), fc("node.rm1-n1", "Drop"), fc("node.rm1-n2", "Return")}, unset,
			map[string]string{"FelixConfiguration node.rm1-n1": `"Drop" would not apply: calico-node's environment (DaemonSet kube-system/calico-node) does not set`}, ""},
		{"node Drop, environment DROP", []*unstructured.Unstructured{fc("default", "Accept"), fc("node.rm1-n1", "Drop")},
			[]runtime.Object{calicoNodeDS("kube-system", env(envEndpointToHost, "DROP"))},
			map[string]string{"DaemonSet kube-system/calico-node": "=DROP"}, ""},
		{"node Drop, environment from a ConfigMap", []*unstructured.Unstructured{fc("default", "Accept"), fc("node.rm1-n1", "Drop")},
			[]runtime.Object{calicoNodeDS("kube-system", corev1.EnvVar{Name: envEndpointToHost, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "x"}}})},
			map[string]string{"FelixConfiguration node.rm1-n1": "lost unless it is ACCEPT or RETURN"}, "comes from a ConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _, _ := fakeCluster{gv: calicoCRDv1, kube: tc.ds, objs: tc.objs}.source()
			st, err := src.read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := lossNames(st.losses)
			if len(got) != len(tc.want) {
				t.Errorf("losses %v, want %v", st.losses, tc.want)
			}
			for name, word := range tc.want {
				if l, ok := got[name]; !ok || !strings.Contains(l.Reason, word) || !strings.Contains(l.Consequence, "Calico's Return") {
					t.Errorf("losses %v, want %s saying %q", st.losses, name, word)
				}
			}
			all := strings.Join(st.warnings, "\n")
			if tc.warns == "" && all != "" || !strings.Contains(all, tc.warns) {
				t.Errorf("warnings %q, want %q", st.warnings, tc.warns)
			}
		})
	}
}

// TestEtcdNodeConfigs: from Calico's etcd, where calico-node's
// environment is not read, the FelixConfiguration node.<name> with
// Return that calico-node's start writes for each node is carried
// without a loss (routed does what Return does), and a node's Drop is a
// loss naming it and saying the environment, which could override it,
// was not read.
func TestEtcdNodeConfigs(t *testing.T) {
	ctx := context.Background()
	src, to := dstest.Client(t), dstest.Client(t)
	node := func(name, action string) string {
		return `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"` + name + `"},"spec":{"defaultEndpointToHostAction":"` + action + `"}}`
	}
	putCalico(t, src, map[string]string{
		"ippools/p":                       `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p"},"spec":{"cidr":"10.246.0.0/16","blockSize":26}}`,
		"felixconfigurations/default":     `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"reportingInterval":"0s","logSeverityScreen":"Info"}}`,
		"felixconfigurations/node.rm1-n1": node("node.rm1-n1", "Return"),
		"felixconfigurations/node.rm1-n2": node("node.rm1-n2", "Return"),
	})
	rep, err := Calico(ctx, src, to, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.PolicyLosses) != 0 {
		t.Errorf("losses %v, want none for calico-node's Return", rep.PolicyLosses)
	}
	putCalico(t, src, map[string]string{"felixconfigurations/node.rm1-n2": node("node.rm1-n2", "Drop")})
	rep, err = Calico(ctx, src, to, Options{DryRun: true})
	if !errors.Is(err, ErrPolicyLoss) {
		t.Fatalf("with node.rm1-n2 Drop: %v, want %v", err, ErrPolicyLoss)
	}
	got := lossNames(rep.PolicyLosses)
	if l, ok := got["FelixConfiguration node.rm1-n2"]; len(got) != 1 || !ok || !strings.Contains(l.Reason, `"Drop" would not apply: calico-node's environment, which overrides it, was not read`) {
		t.Errorf("losses %v, want only FelixConfiguration node.rm1-n2's Drop", rep.PolicyLosses)
	}
}

// TestEtcdWarnsOfWhatItCannotCheck: from Calico's etcd (a real one),
// calico-node's environment and the admin network policies live in
// Kubernetes, which the etcd source does not read: the run carries on
// with a warning for each, and the one for the environment says what
// an unset defaultEndpointToHostAction means (Calico's Drop). An
// explicit Accept drops that part of it.
func TestEtcdWarnsOfWhatItCannotCheck(t *testing.T) {
	ctx := context.Background()
	src, to := dstest.Client(t), dstest.Client(t)
	putCalico(t, src, map[string]string{
		"ippools/p":                   `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p"},"spec":{"cidr":"10.246.0.0/16","blockSize":26}}`,
		"felixconfigurations/default": `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"logSeverityScreen":"Info"}}`,
	})
	check := func(wantDrop bool) {
		t.Helper()
		rep, err := Calico(ctx, src, to, Options{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(rep.Warnings, "\n")
		if !strings.Contains(all, "calico-node's environment was not checked") || !strings.Contains(all, envEndpointToHost) ||
			!strings.Contains(all, "AdminNetworkPolicies and BaselineAdminNetworkPolicies were not checked") {
			t.Errorf("warnings %q", rep.Warnings)
		}
		if got := strings.Contains(all, "its default, Drop"); got != wantDrop {
			t.Errorf("warning about Calico's Drop: %v, want %v: %q", got, wantDrop, rep.Warnings)
		}
		if len(rep.PolicyLosses) != 0 {
			t.Errorf("losses %v", rep.PolicyLosses)
		}
	}
	check(true)
	putCalico(t, src, map[string]string{
		"felixconfigurations/default": `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"defaultEndpointToHostAction":"Accept"}}`,
	})
	check(false)
}

// TestEtcdCarriesWireguardSettings: Calico's FelixConfiguration "default"
// turning WireGuard on (IPv4, IPv6, host encryption) arrives in routed's
// datastore with the three settings on, which routed's felix encrypts
// by (issue 40: the same fields through migration).
func TestEtcdCarriesWireguardSettings(t *testing.T) {
	ctx := context.Background()
	src, to := dstest.Client(t), dstest.Client(t)
	putCalico(t, src, map[string]string{
		"ippools/p": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p"},"spec":{"cidr":"10.247.0.0/16","blockSize":26}}`,
		"felixconfigurations/default": `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},` +
			`"spec":{"defaultEndpointToHostAction":"Accept","wireguardEnabled":true,"wireguardEnabledV6":true,"wireguardHostEncryptionEnabled":true}}`,
	})
	if _, err := Calico(ctx, src, to, Options{}); err != nil {
		t.Fatal(err)
	}
	r, err := to.Get(ctx, api.KindFelixConfiguration, "default")
	if err != nil {
		t.Fatalf("routed's FelixConfiguration default after the migration: %v", err)
	}
	s := r.(*api.FelixConfiguration).Spec
	for name, v := range map[string]*bool{"wireguardEnabled": s.WireguardEnabled, "wireguardEnabledV6": s.WireguardEnabledV6,
		"wireguardHostEncryptionEnabled": s.WireguardHostEncryptionEnabled} {
		if v == nil || !*v {
			t.Errorf("%s not carried on: %+v", name, s)
		}
	}
}
