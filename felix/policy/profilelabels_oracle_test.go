package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestProfileLabelsMatchAMap: get, len, all and equal against a map
// oracle, with keys that sort around each other (prefixes, empty, high
// bytes, NUL).
func TestProfileLabelsMatchAMap(t *testing.T) {
	pool := []string{"", "a", "a\x00", "aa", "ab", "b", "\x7f", "\x80", "\xff", "pcns.a", "pcns.", "pcns", "z", "zz", strings.Repeat("k", 300)}
	rng := rand.New(rand.NewPCG(7, 8))
	var all []map[string]string
	for range 3000 {
		m := map[string]string{}
		for range rng.IntN(len(pool) + 1) {
			m[pool[rng.IntN(len(pool))]] = pool[rng.IntN(len(pool))]
		}
		all = append(all, m)
		l := packProfileLabels(m)
		if l.len() != len(m) || len(l)%2 != 0 {
			t.Fatalf("%v: len %d", m, l.len())
		}
		if !maps.Equal(maps.Collect(l.all()), m) {
			t.Fatalf("%v: all %v", m, maps.Collect(l.all()))
		}
		if !slices.IsSorted(slices.Collect(func(yield func(string) bool) {
			for k := range l.all() {
				if !yield(k) {
					return
				}
			}
		})) {
			t.Fatalf("%v: not sorted", m)
		}
		for _, k := range pool {
			v, ok := l.get(k)
			w, wok := m[k]
			if v != w || ok != wok {
				t.Fatalf("%v: get(%q) = %q %v, want %q %v", m, k, v, ok, w, wok)
			}
		}
	}
	for i := range 300 {
		for j := range 300 {
			a, b := all[i], all[j]
			if packProfileLabels(a).equal(packProfileLabels(b)) != maps.Equal(a, b) {
				t.Fatalf("%v vs %v: equal %v, maps.Equal %v", a, b, !maps.Equal(a, b), maps.Equal(a, b))
			}
		}
	}
}

// TestMergedLabelsMatchTheProfiles: an endpoint's view (labelView, effective, and
// the namespace/service account label sets) against a merge computed
// from the API objects alone, with up to 5 profiles that set the same
// keys, profiles re-set with the same labels (a new map: equal, no
// rederive) and with changed ones, and deleted.
func TestMergedLabelsMatchTheProfiles(t *testing.T) {
	c := NewModel()
	rng := rand.New(rand.NewPCG(9, 10))
	keys := []string{"app", "team", "pcns.team", "pcsa.team", "pcns.env", "env", "a", "", api.LabelNamespace, api.LabelServiceAccount}
	vals := []string{"", "x", "y", "z"}
	rl := func(n int) map[string]string {
		m := map[string]string{}
		for range n {
			m[keys[rng.IntN(len(keys))]] = vals[rng.IntN(len(vals))]
		}
		return m
	}
	api_ := map[string]map[string]string{} // profile name -> LabelsToApply as given
	names := []string{"kns.prod", "ksa.prod.sa", "p1", "p2", "p3", "kns.dev", "ksa.dev.sa"}
	set := func(name string, m map[string]string) {
		if err := c.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: name}, Spec: api.ProfileSpec{LabelsToApply: m}}); err != nil {
			t.Fatal(err)
		}
		api_[name] = maps.Clone(m)
	}
	for _, n := range names {
		set(n, rl(5))
	}
	eps := map[string]Endpoint{}
	for i := range 200 {
		ns := []string{"prod", "dev"}[i%2]
		profs := []string{"kns." + ns, "ksa." + ns + ".sa"}
		for range rng.IntN(4) {
			profs = append(profs, names[2+rng.IntN(3)])
		}
		if i%5 == 0 {
			slices.Reverse(profs)
		}
		ep := Endpoint{Key: fmt.Sprintf("e%d", i), Namespace: ns, ServiceAccount: "sa", Labels: rl(rng.IntN(3)), Profiles: profs}
		eps[ep.Key] = ep
		c.SetEndpoint(ep)
	}
	oracle := func(ep Endpoint) map[string]string {
		out := map[string]string{}
		for _, p := range ep.Profiles {
			if m, ok := api_[p]; ok {
				for k, v := range m {
					out[k] = v
				}
			}
		}
		for k, v := range ep.Labels {
			out[k] = v
		}
		out[api.LabelNamespace] = ep.Namespace
		out[api.LabelServiceAccount] = ep.ServiceAccount
		return out
	}
	nsOracle := func(merged map[string]string, prefix, prof, name string) map[string]string {
		out := map[string]string{}
		for k, v := range merged {
			if s, ok := strings.CutPrefix(k, prefix); ok {
				out[s] = v
			}
		}
		if m, ok := api_[prof]; ok {
			for k, v := range m {
				if !strings.HasPrefix(k, nsLabelPrefix) && !strings.HasPrefix(k, saLabelPrefix) {
					out[k] = v
				}
			}
			for k, v := range m {
				if s, ok := strings.CutPrefix(k, prefix); ok {
					out[s] = v
				}
			}
		}
		out[LabelName] = name
		return out
	}
	check := func(when string) {
		for key, ep := range eps {
			g := c.endpoint(key).g
			want := oracle(ep)
			if got := g.effective(); !maps.Equal(got, want) {
				t.Fatalf("%s %s: effective %v want %v", when, key, got, want)
			}
			for _, k := range append(keys, "nope", "zzz") {
				v, ok := labelView{g}.Get(k)
				w, wok := want[k]
				if v != w || ok != wok {
					t.Fatalf("%s %s: Get(%q) %q %v want %q %v", when, key, k, v, ok, w, wok)
				}
			}
			ns := nsOracle(want, nsLabelPrefix, "kns."+ep.Namespace, ep.Namespace)
			sa := nsOracle(want, saLabelPrefix, "ksa."+ep.Namespace+"."+ep.ServiceAccount, ep.ServiceAccount)
			if !maps.Equal(g.nsLabels.m, ns) || !maps.Equal(g.saLabels.m, sa) {
				t.Fatalf("%s %s: ns %v want %v; sa %v want %v", when, key, g.nsLabels.m, ns, g.saLabels.m, sa)
			}
		}
	}
	check("first")
	for round := range 30 {
		n := names[rng.IntN(len(names))]
		switch rng.IntN(3) {
		case 0:
			set(n, maps.Clone(api_[n])) // same labels, a new map
		case 1:
			set(n, rl(rng.IntN(6)))
		case 2:
			c.DeleteProfile(n)
			delete(api_, n)
		}
		check(fmt.Sprintf("round %d (%s)", round, n))
	}
}
