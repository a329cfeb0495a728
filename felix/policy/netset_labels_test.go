package policy

import (
	"maps"
	"slices"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestNetsetLabels: a namespaced NetworkSet's selectors see its
// namespace profile's labels, its own over them, and
// projectcalico.org/namespace set to its namespace whatever it says,
// without projectcalico.org/serviceaccount; the overridden labels are
// named for the warning. A GlobalNetworkSet keeps its labels as given
// (as Calico: only a cluster administrator writes one).
func TestNetsetLabels(t *testing.T) {
	kns := &profile{name: "kns.dev", labels: packProfileLabels(map[string]string{"pcns.env": "dev", "team": "ns"})}
	own := map[string]string{"team": "mine", api.LabelNamespace: "prod", api.LabelServiceAccount: "admin"}
	n := newNetset(NetworkSet{Key: "ns:dev/x", Namespace: "dev", Labels: own}, kns)
	want := map[string]string{"pcns.env": "dev", "team": "mine", api.LabelNamespace: "dev"}
	if !maps.Equal(n.selLabels, want) {
		t.Errorf("selector labels %v, want %v", n.selLabels, want)
	}
	if n.Labels[api.LabelNamespace] != "prod" {
		t.Errorf("the set's own labels were changed: %v", n.Labels)
	}
	if got := n.nsLabels["env"]; got != "dev" {
		t.Errorf("namespace labels %v, want env=dev", n.nsLabels)
	}
	forged := netsetForgedLabels("dev", own)
	if !slices.Equal(forged, []string{api.LabelNamespace + "=prod", api.LabelServiceAccount + "=admin"}) {
		t.Errorf("forged labels %v", forged)
	}
	if f := netsetForgedLabels("dev", map[string]string{api.LabelNamespace: "dev"}); f != nil {
		t.Errorf("its own namespace named as forged: %v", f)
	}

	g := newNetset(NetworkSet{Key: "gns:y", Labels: map[string]string{api.LabelNamespace: "prod", "role": "x"}}, nil)
	if !maps.Equal(g.selLabels, g.Labels) || g.nsLabels != nil {
		t.Errorf("global set: selector labels %v, namespace labels %v", g.selLabels, g.nsLabels)
	}
}

// TestNetsetMatchScopes: the matcher's view of network sets under
// namespace and service account selectors (finding 5 of the review):
// a negated selector picks a GlobalNetworkSet, all() and service
// account names do not; a namespaced set is picked by its namespace's
// labels, not by pcns. labels of its own.
func TestNetsetMatchScopes(t *testing.T) {
	kns := &profile{name: "kns.dev", labels: packProfileLabels(map[string]string{"pcns.env": "dev"})}
	global := newNetset(NetworkSet{Key: "gns:bad", Labels: map[string]string{"kind": "bad"}}, nil)
	dev := newNetset(NetworkSet{Key: "ns:dev/bad", Namespace: "dev", Labels: map[string]string{"kind": "bad", "pcns.env": "prod"}}, kns)
	for _, tc := range []struct {
		nsSel, saSel string
		saNames      []string
		global, dev  bool
	}{
		{nsSel: "!has(trusted)", global: true, dev: true},
		{nsSel: "all()", global: false, dev: true},
		{nsSel: "env == 'dev'", global: false, dev: true},
		{nsSel: "env == 'prod'", global: false, dev: false},
		{nsSel: "!has(env)", global: true, dev: false},
		{saSel: "!has(trusted)", global: true, dev: true},
		{saSel: "has(trusted)", global: false, dev: false},
		{saNames: []string{"default"}, global: false, dev: false},
	} {
		m, err := newMatcher("rule", "kind == 'bad'", tc.nsSel, "", tc.saNames, tc.saSel)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.netset(global); got != tc.global {
			t.Errorf("nsSel %q saSel %q names %v: GlobalNetworkSet matched=%v, want %v", tc.nsSel, tc.saSel, tc.saNames, got, tc.global)
		}
		if got := m.netset(dev); got != tc.dev {
			t.Errorf("nsSel %q saSel %q names %v: dev's NetworkSet matched=%v, want %v", tc.nsSel, tc.saSel, tc.saNames, got, tc.dev)
		}
	}
}
