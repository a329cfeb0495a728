package policy

import (
	"maps"
	"testing"
)

// TestProfileLabelsAreTheMap: packed labels give back exactly the map
// they were made of, and compare equal exactly when the maps do.
func TestProfileLabelsAreTheMap(t *testing.T) {
	m := map[string]string{"pcns.env": "prod", "pcns.team": "t01", "team": "ns", "empty": "", "pcns.projectcalico.org/name": "ns-1"}
	l := packProfileLabels(m)
	if got := maps.Collect(l.all()); !maps.Equal(got, m) {
		t.Fatalf("packed %v gives %v", m, got)
	}
	if packProfileLabels(nil) != nil || len(maps.Collect(profileLabels(nil).all())) != 0 {
		t.Fatal("no labels are not empty")
	}
	for _, o := range []map[string]string{
		{"pcns.env": "prod", "pcns.team": "t01", "team": "ns", "empty": ""},
		{"pcns.env": "prod", "pcns.team": "t01", "team": "ns", "empty": "", "pcns.projectcalico.org/name": "ns-2"},
		{"pcns.env": "prod", "pcns.team": "t01", "team": "ns", "empty": "", "pcns.projectcalico.org/nam": "ns-1"},
		nil,
	} {
		if l.equal(packProfileLabels(o)) {
			t.Errorf("%v equal to %v", m, o)
		}
	}
	if !l.equal(packProfileLabels(maps.Clone(m))) {
		t.Error("the same labels differ")
	}
}

// TestProfileLabelsGet: get finds every label and only those, at every
// size (binary search bounds).
func TestProfileLabelsGet(t *testing.T) {
	m := map[string]string{}
	for n := range 9 {
		l := packProfileLabels(m)
		if l.len() != n {
			t.Fatalf("len %d, want %d", l.len(), n)
		}
		for k, v := range m {
			if got, ok := l.get(k); !ok || got != v {
				t.Errorf("%d labels: get(%q) = %q, %v; want %q", n, k, got, ok, v)
			}
		}
		for _, k := range []string{"", "a", "k", "k0", "k00", "k9", "z", "k" + string(rune('0'+n))} {
			if _, in := m[k]; in {
				continue
			}
			if got, ok := l.get(k); ok {
				t.Errorf("%d labels: get(%q) = %q, true for a label it has not", n, k, got)
			}
		}
		m["k"+string(rune('0'+n))] = "v" + string(rune('0'+n))
	}
}
