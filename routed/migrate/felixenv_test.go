package migrate

import (
	"context"
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
// over Calico's own default, Drop; anything but Accept is a policy loss
// (routed accepts), named after where it comes from. Failsafe ports set
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
		{"environment RETURN, operator", fc(accept), []runtime.Object{calicoNodeDS("calico-system", env(envEndpointToHost, "RETURN"))}, false,
			"DaemonSet calico-system/calico-node", "=RETURN", ""},
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
