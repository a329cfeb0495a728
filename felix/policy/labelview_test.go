package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/selector"
)

// mergedLabels is what an endpoint's labels were before groups read
// them in place (labelView): a map of its profiles' labels in order,
// its own over them, then its namespace and service account names.
func mergedLabels(c *Calc, ep Endpoint) map[string]string {
	out := map[string]string{}
	for _, name := range ep.Profiles {
		if p := c.profiles[name]; p != nil {
			maps.Insert(out, p.labels.all())
		}
	}
	maps.Copy(out, ep.Labels)
	if ep.Namespace != "" {
		out[api.LabelNamespace] = ep.Namespace
	}
	if ep.ServiceAccount != "" {
		out[api.LabelServiceAccount] = ep.ServiceAccount
	}
	return out
}

// TestLabelViewIsTheMergedLabels: for endpoints whose own labels
// overlap their profiles' (and carry pcns./pcsa. labels, and the
// identity labels with other values), the labels a group's selectors
// see, its namespace's and its service account's labels are exactly
// those of the merged map, key by key and selector by selector, also
// after the profiles change.
func TestLabelViewIsTheMergedLabels(t *testing.T) {
	c := NewModel()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"app", "tier", "pcns.team", "pcsa.role", "team", "role", api.LabelNamespace, api.LabelServiceAccount,
		api.LabelOrchestrator, LabelName, "a", "ab", "", "x/y", strings.Repeat("k", 200)}
	values := []string{"", "web", "db", "a", "ab", strings.Repeat("v", 300)}
	randLabels := func(n int) map[string]string {
		m := map[string]string{}
		for range n {
			m[keys[rng.IntN(len(keys))]] = values[rng.IntN(len(values))]
		}
		return m
	}
	setProfiles := func() {
		for _, ns := range []string{"prod", "dev", ""} {
			for _, name := range []string{api.NamespaceProfilePrefix + ns, api.ServiceAccountProfilePrefix + ns + ".sa1", "extra"} {
				if err := c.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: name}, Spec: api.ProfileSpec{LabelsToApply: randLabels(4)}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	setProfiles()
	given := map[string]Endpoint{}
	for i := range 300 {
		ns := []string{"prod", "dev", ""}[i%3]
		sa := []string{"sa1", "", "sa2"}[i%3]
		ep := Endpoint{Key: fmt.Sprintf("ep-%d", i), Namespace: ns, ServiceAccount: sa, Labels: randLabels(rng.IntN(6)),
			Profiles: []string{api.NamespaceProfilePrefix + ns, api.ServiceAccountProfilePrefix + ns + "." + sa}}
		if i%4 == 0 {
			ep.Profiles = append(ep.Profiles, "extra", "missing")
		}
		given[ep.Key] = ep
		c.SetEndpoint(ep)
	}
	var sels []selector.Selector
	for _, k := range keys {
		for _, v := range values {
			for _, s := range []string{"%s == '%s'", "%s != '%s'", "has(%s) && %s starts with '%s'", "%s in {'%s', 'web'}", "!(%s not in {'%s'})"} {
				text := fmt.Sprintf(s, k, v)
				if strings.Count(s, "%s") == 3 {
					text = fmt.Sprintf(s, k, k, v)
				}
				if sel, err := selector.Parse(text); err == nil {
					sels = append(sels, sel)
				}
			}
		}
	}
	check := func(when string) {
		for key, ep := range given {
			g := c.endpoint(key).g
			want := mergedLabels(c, ep)
			v := labelView{g}
			for _, k := range append(slices.Collect(maps.Keys(want)), keys...) {
				got, ok := v.Get(k)
				if w, wok := want[k]; got != w || ok != wok {
					t.Fatalf("%s: %s: label %q: view %q %v, merged %q %v", when, key, k, got, ok, w, wok)
				}
			}
			if !maps.Equal(g.effective(), want) {
				t.Fatalf("%s: %s: effective %v, merged %v", when, key, g.effective(), want)
			}
			ns := scopeLabels(want, nsLabelPrefix, c.profiles[api.NamespaceProfilePrefix+ep.Namespace], ep.Namespace)
			sa := scopeLabels(want, saLabelPrefix, c.profiles[api.ServiceAccountProfilePrefix+ep.Namespace+"."+ep.ServiceAccount], ep.ServiceAccount)
			if !maps.Equal(g.nsLabels.m, ns) || !maps.Equal(g.saLabels.m, sa) {
				t.Fatalf("%s: %s: namespace labels %v (want %v), service account labels %v (want %v)", when, key, g.nsLabels.m, ns, g.saLabels.m, sa)
			}
			for _, sel := range sels {
				if sel.EvaluateLabels(v) != sel.Evaluate(want) {
					t.Fatalf("%s: %s: %s: view %v, merged map %v", when, key, sel, sel.EvaluateLabels(v), sel.Evaluate(want))
				}
			}
		}
	}
	check("first")
	for round := range 5 {
		setProfiles()
		check(fmt.Sprintf("profiles changed (%d)", round))
	}
	for key := range given {
		c.DeleteEndpoint(key)
	}
	if len(c.groups.scopes) != 0 || len(c.labelSets.byHash) != 0 || len(c.profileUsers) != 0 || len(c.keys.ids) != 0 || c.weps.n != 0 {
		t.Errorf("left behind: %d scopes, %d label sets, %d profile users, label keys %v, %d endpoints",
			len(c.groups.scopes), len(c.labelSets.byHash), len(c.profileUsers), c.keys.ids, c.weps.n)
	}
}

// TestOwnLabelsEncoding: own labels read back as given (keys and values
// of any length, empty ones, keys that prefix others), get finds
// exactly the labels there are, different label sets never encode
// alike, and the keys' numbers are freed when the last set goes.
func TestOwnLabelsEncoding(t *testing.T) {
	sets := []map[string]string{
		nil, {}, {"": ""}, {"a": ""}, {"": "a"}, {"a": "b"}, {"ab": ""}, {"a": "", "b": ""}, {"a": "b", "ab": "c"},
		{strings.Repeat("k", 127): "x"}, {strings.Repeat("k", 128): "x"}, {"k": strings.Repeat("v", 20000)},
		{"a\x00b": "c"}, {"a": "\x00b\x80"}, {"\x80": "\x01"},
	}
	seen := map[string]int{}
	keys := newLabelKeys()
	var made []ownLabels
	for i, m := range sets {
		o := makeOwnLabels(keys, m)
		made = append(made, o)
		if j, dup := seen[o.s]; dup && !maps.Equal(sets[j], m) {
			t.Errorf("%v and %v encode alike", sets[j], m)
		}
		seen[o.s] = i
		if got := maps.Collect(o.all()); len(got) != len(m) || !maps.Equal(got, m) && len(m) > 0 {
			t.Errorf("%v read back as %v", m, got)
		}
		if o.len() != len(m) || !o.equal(m) {
			t.Errorf("%v: len %d, equal %v", m, o.len(), o.equal(m))
		}
		for _, other := range sets {
			if o.equal(other) != (maps.Equal(m, other) || len(m) == 0 && len(other) == 0) {
				t.Errorf("%v equal %v: %v", m, other, o.equal(other))
			}
			for k := range other {
				v, ok := o.get(k)
				if w, wok := m[k]; v != w || ok != wok {
					t.Errorf("%v get %q: %q %v", m, k, v, ok)
				}
			}
		}
		if _, ok := o.get("no such key"); ok {
			t.Errorf("%v has a label no group has", m)
		}
	}
	for _, o := range made {
		o.release()
	}
	if len(keys.ids) != 0 || len(keys.free) != len(keys.names) {
		t.Errorf("keys left after every label set went: %v", keys.ids)
	}
}
