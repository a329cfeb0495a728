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
