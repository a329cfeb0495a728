package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/routed-net/routed/felix/policy/nftdp"
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

// TestGroupsShareLabels: endpoints with the same labels, profiles,
// namespace, service account and named ports share one group (one copy
// of their labels and of what selectors decide), a namespace's labels
// are one set for all its groups, relabelling one endpoint leaves the
// others' labels and memberships alone, the caller's maps and strings
// are not kept, an endpoint given again unchanged changes nothing, and
// nothing is left once the endpoints are gone.
func TestGroupsShareLabels(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	if err := c.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: "kns.prod"}, Spec: api.ProfileSpec{
		LabelsToApply: map[string]string{"pcns.team": "a"}}}); err != nil {
		t.Fatal(err)
	}
	setPol := func(name, src string) {
		mustPolicy(t, c, gnpYAML(name, "10", "default", fmt.Sprintf("  selector: role == 'local'\n  ingress: [{action: Allow, source: {selector: %q}}]", src)))
	}
	setPol("web", "app == 'web'")
	setPol("team", "team == 'a'")
	mk := func(name, ip, app string) Endpoint {
		// Each endpoint's own map and strings, as decoded.
		e := ep(name, false, ip, map[string]string{strings.Clone("app"): strings.Clone(app)})
		e.Namespace, e.ServiceAccount = strings.Clone("prod"), strings.Clone("default")
		e.Profiles = []string{strings.Clone("kns.prod")}
		e.Ports = []NamedPort{{Name: strings.Clone("http"), Proto: 6, Port: 8080}}
		return e
	}
	c.SetEndpoint(ep("local", true, "10.0.0.1", map[string]string{"role": "local"}))
	given := map[string]Endpoint{}
	for i, name := range []string{"a", "b", "c"} {
		given[name] = mk(name, fmt.Sprintf("10.0.1.%d", i+1), "web")
		c.SetEndpoint(given[name])
	}
	c.SetEndpoint(mk("d", "10.0.1.9", "db"))
	a, b, cc, d := c.endpoint("a"), c.endpoint("b"), c.endpoint("c"), c.endpoint("d")
	if a.g != b.g || a.g != cc.g || a.g == d.g || len(a.g.eps) != 3 {
		t.Fatalf("groups: a %p b %p c %p d %p (%d endpoints in a's)", a.g, b.g, cc.g, d.g, len(a.g.eps))
	}
	if a.g.nsLabels != d.g.nsLabels || a.g.nsLabels.m["team"] != "a" {
		t.Errorf("namespace labels not shared: %v %v", a.g.nsLabels.m, d.g.nsLabels.m)
	}
	g := given["a"]
	var appKey, appValue string
	for k, v := range a.g.own.all() {
		appKey, appValue = k, v
	}
	if appKey != "app" || appValue != "web" {
		t.Errorf("a's own labels: %q=%q", appKey, appValue)
	}
	if unsafe.StringData(a.g.ns) == unsafe.StringData(g.Namespace) || unsafe.StringData(appValue) == unsafe.StringData(g.Labels["app"]) ||
		unsafe.StringData(a.g.profiles[0]) == unsafe.StringData(g.Profiles[0]) || unsafe.StringData(a.g.ports[0].Name) == unsafe.StringData(g.Ports[0].Name) {
		t.Error("a group keeps a string of the endpoint it was given")
	}
	g.Labels["app"] = "changed by the caller"
	if v, _ := (labelView{a.g}).Get("app"); v != "web" {
		t.Errorf("the caller's map is kept: app=%q", v)
	}
	web := func() []string {
		for name, set := range s.sets {
			if strings.HasPrefix(name, "s-") && len(set) > 0 {
				if _, ok := set[nftdp.Member{Prefix: netip.MustParsePrefix("10.0.1.9/32")}]; !ok {
					var out []string
					for m := range set {
						out = append(out, m.Prefix.String())
					}
					slices.Sort(out)
					return out
				}
			}
		}
		return nil
	}
	if got := web(); !slices.Equal(got, []string{"10.0.1.1/32", "10.0.1.2/32", "10.0.1.3/32"}) {
		t.Fatalf("app == 'web' set: %v", got)
	}

	s.ops = nil
	c.SetEndpoint(mk("b", "10.0.1.2", "web"))
	if len(s.ops) != 0 {
		t.Errorf("an endpoint given again unchanged: %v", s.ops)
	}
	// A snapshot gives every profile again: with the same labels, no
	// endpoint is derived again.
	if err := c.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: "kns.prod"}, Spec: api.ProfileSpec{
		LabelsToApply: map[string]string{"pcns.team": "a"}}}); err != nil {
		t.Fatal(err)
	}
	if len(s.ops) != 0 {
		t.Errorf("the same profile given again: %v", s.ops)
	}

	c.SetEndpoint(mk("b", "10.0.1.2", "db"))
	if app, _ := (labelView{a.g}).Get("app"); c.endpoint("b").g != d.g || app != "web" || len(a.g.eps) != 2 || c.endpoint("c").g != a.g {
		t.Errorf("relabelled b: group %p (d's %p); a's app=%q with %d endpoints", c.endpoint("b").g, d.g, app, len(a.g.eps))
	}
	if got := web(); !slices.Equal(got, []string{"10.0.1.1/32", "10.0.1.3/32"}) {
		t.Errorf("app == 'web' set after b's relabel: %v", got)
	}

	for _, name := range []string{"a", "b", "c", "d", "local"} {
		c.DeleteEndpoint(name)
	}
	if len(c.groups.byHash) != 0 || len(c.groups.scopes) != 0 || len(c.labelSets.byHash) != 0 || len(c.profileUsers) != 0 {
		t.Errorf("left behind: %d groups, %d scopes, %d label sets, profile users %v", len(c.groups.byHash), len(c.groups.scopes), len(c.labelSets.byHash), c.profileUsers)
	}
}

// TestDecodedEndpointNotKept: the calculator keeps nothing of a decoded
// WorkloadEndpoint but its name: the resource, its slices and its
// strings can all be collected.
func TestDecodedEndpointNotKept(t *testing.T) {
	c := NewCalc(newRecSink(), LogConfig{})
	var kept sync.WaitGroup
	func() {
		long := func(s string) string { return strings.Clone(s + strings.Repeat("x", 24)) } // not a tiny allocation
		ns, app := long("prod"), long("web")
		w := &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: "n1-k8s-prod-web-eth0", Labels: map[string]string{"app": app}},
			Spec: api.WorkloadEndpointSpec{Node: long("n1"), Orchestrator: "k8s", Namespace: ns, Pod: "web", InterfaceName: "cali1",
				IPNetworks: []string{"10.0.0.5/32"}, Profiles: []string{long("kns.prod")}}}
		for _, p := range []*byte{unsafe.StringData(ns), unsafe.StringData(app), unsafe.StringData(w.Spec.Node), unsafe.StringData(w.Spec.Profiles[0])} {
			kept.Add(1)
			runtime.AddCleanup(p, func(int) { kept.Done() }, 0)
		}
		kept.Add(2)
		runtime.AddCleanup(w, func(int) { kept.Done() }, 0)
		runtime.AddCleanup(&w.Spec.Profiles[0], func(int) { kept.Done() }, 0)
		e, err := EndpointFromAPI(w, false)
		if err != nil {
			t.Fatal(err)
		}
		c.SetEndpoint(e)
	}()
	done := make(chan struct{})
	go func() { kept.Wait(); close(done) }()
	for range 50 {
		runtime.GC()
		select {
		case <-done:
			if got, ok := c.Endpoint("n1-k8s-prod-web-eth0"); !ok || got.Namespace != "prod"+strings.Repeat("x", 24) {
				t.Errorf("the endpoint in the calculator: %+v %v", got, ok)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Error("part of the decoded WorkloadEndpoint is still reachable from the calculator")
}

// TestEndpointFootprint guards the size of what the calculator keeps per
// endpoint (felix/scale_test.go measures a big cluster): 20,000 remote
// endpoints as replicas of 2,000 Deployments, each endpoint given as
// the feed decodes it (its own maps and strings), must cost the heap
// less than 240 bytes each (190 with labels read in place, scopes,
// numbered label keys and the endpoint table, its key included; 324
// before them, 2,243 before endpoint groups).
func TestEndpointFootprint(t *testing.T) {
	const n, replicas = 20000, 10
	c := NewCalc(discard{}, LogConfig{})
	mk := func(i int) Endpoint {
		ns, app := fmt.Sprintf("ns-%d", i/replicas%200), fmt.Sprintf("app-%d", i/replicas)
		return Endpoint{Key: fmt.Sprintf("node-%d-k8s-%s-%s-%d-eth0", i%500, ns, app, i), Node: fmt.Sprintf("node-%d", i%500),
			Namespace: ns, ServiceAccount: "default", Profiles: []string{"kns." + ns, "ksa." + ns + ".default"},
			Labels: map[string]string{"app": app, "pod-template-hash": fmt.Sprintf("%x", i/replicas*7919), api.LabelNamespace: ns,
				api.LabelOrchestrator: "k8s", api.LabelServiceAccount: "default"},
			IPs:   []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)},
			Ports: []NamedPort{{Name: "http", Proto: 6, Port: 8080}}}
	}
	before := heapAfterGC()
	for i := range n {
		c.SetEndpoint(mk(i))
	}
	per := (float64(heapAfterGC()) - float64(before)) / n
	t.Logf("%.0f bytes per endpoint", per)
	if per > 240 {
		t.Errorf("%.0f bytes per endpoint, want < 240", per)
	}
	runtime.KeepAlive(c)
}

func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
