package policy

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestLabelIndexMatchesFreshCalc: a calculator that answers from its
// label index (endpoints sharing labels, then policies edited to select
// otherwise, sets made and dropped, profile labels changed, endpoints
// relabelled and deleted) writes after every step exactly the state a
// new calculator fed the same resources writes.
func TestLabelIndexMatchesFreshCalc(t *testing.T) {
	pols := map[string]string{}
	profiles := map[string]*api.Profile{}
	eps := map[string]Endpoint{}

	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	setPol := func(name, sel, src string) {
		y := gnpYAML(name, "10", "default", fmt.Sprintf("  selector: %s\n  ingress: [{action: Allow, protocol: TCP, source: {selector: %q}, destination: {ports: [80, http]}}]", sel, src))
		pols[name] = y
		mustPolicy(t, c, y)
	}
	delPol := func(name string) {
		delete(pols, name)
		c.DeletePolicy("gnp:" + name)
	}
	setProfile := func(name string, labels map[string]string) {
		p := &api.Profile{Metadata: api.ObjectMeta{Name: name}, Spec: api.ProfileSpec{LabelsToApply: labels,
			Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}}}}
		profiles[name] = p
		if err := c.SetProfile(p); err != nil {
			t.Fatal(err)
		}
	}
	setEP := func(name string, local bool, ip string, labels map[string]string) {
		e := ep(name, local, ip, labels)
		e.Profiles = []string{"kns.prod"}
		e.Ports = []NamedPort{{Name: "http", Proto: 6, Port: 8080}}
		eps[name] = e
		c.SetEndpoint(e)
	}
	delEP := func(name string) {
		delete(eps, name)
		c.DeleteEndpoint(name)
	}
	check := func(step string) {
		t.Helper()
		f := resources{profiles: profiles, pols: pols, eps: eps}.fresh(t, LogConfig{})
		if !reflect.DeepEqual(s.sets, f.sets) {
			t.Errorf("%s: sets\n%v\nfresh calculator:\n%v", step, s.sets, f.sets)
		}
		if !reflect.DeepEqual(s.eps, f.eps) || !reflect.DeepEqual(s.fams, f.fams) {
			t.Errorf("%s: dispatch %v %v, fresh calculator %v %v", step, s.eps, s.fams, f.eps, f.fams)
		}
		if !slices.Equal(keys(s.chains), keys(f.chains)) {
			t.Errorf("%s: chains %v, fresh calculator %v", step, keys(s.chains), keys(f.chains))
		}
	}

	setProfile("kns.prod", map[string]string{"pcns.team": "a"})
	setPol("web", "app == 'web'", "app == 'client'")
	setPol("team", "app == 'web'", "team == 'a'")
	setEP("w1", true, "10.0.0.1", map[string]string{"app": "web"})
	setEP("w2", true, "10.0.0.2", map[string]string{"app": "web"}) // same key as w1
	for i := range 4 {
		setEP(fmt.Sprintf("c%d", i), false, fmt.Sprintf("10.0.1.%d", i), map[string]string{"app": "client"})
	}
	check("same labels")

	// The policy now takes its sources elsewhere: a new set, the old one
	// dropped; pods with cached keys must see the new set.
	setPol("web", "app == 'web'", "app == 'db'")
	setEP("d1", false, "10.0.2.1", map[string]string{"app": "db"})
	setEP("c9", false, "10.0.1.9", map[string]string{"app": "client"})
	check("sources changed")

	// Selection changes: a new local pod with w1's labels gets the new
	// list; the profile's labels change (every endpoint re-derived).
	setPol("db", "app == 'web' || app == 'db'", "all()")
	setEP("w3", true, "10.0.0.3", map[string]string{"app": "web"})
	setProfile("kns.prod", map[string]string{"pcns.team": "b"})
	check("selection and profile labels changed")

	// New sets made while their members exist (filled from the label
	// index, several endpoints per key), one selecting by a label a
	// profile applies; a profile no endpoint reads changes nothing.
	setPol("late", "app == 'web'", "app == 'client' || app == 'db'")
	setPol("teamb", "app == 'web'", "team == 'b' && app == 'client'")
	setProfile("kns.other", map[string]string{"pcns.team": "c"})
	check("sets made from the index")

	// Relabel and delete.
	setEP("c1", false, "10.0.1.1", map[string]string{"app": "db"})
	setEP("w2", true, "10.0.0.2", map[string]string{"app": "client"})
	delEP("c2")
	delEP("w1")
	delPol("team")
	check("relabelled and deleted")
}

// resources are what a test has given a calculator, by name.
type resources struct {
	tier     *api.Tier
	profiles map[string]*api.Profile
	netsets  map[string]NetworkSet
	pols     map[string]string // YAML
	eps      map[string]Endpoint
}

// fresh is what a new calculator writes when given the resources in
// name order: the state an incremental one must equal.
func (r resources) fresh(t *testing.T, lc LogConfig) *recSink {
	t.Helper()
	f := newRecSink()
	c := NewCalc(f, lc)
	if r.tier != nil {
		c.SetTier(r.tier)
	}
	for _, name := range slices.Sorted(maps.Keys(r.profiles)) {
		if err := c.SetProfile(r.profiles[name]); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.netsets)) {
		c.SetNetworkSet(r.netsets[name])
	}
	for _, name := range slices.Sorted(maps.Keys(r.pols)) {
		mustPolicy(t, c, r.pols[name])
	}
	for _, name := range slices.Sorted(maps.Keys(r.eps)) {
		c.SetEndpoint(r.eps[name])
	}
	return f
}
