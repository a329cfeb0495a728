package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// TestGuardsCoverTheirRuns: after every step of a random history
// (policies with Allow, Deny, Pass and Log rules whose peers are
// selectors, namespace selectors, nets, both, notSelectors or anything,
// in two tiers whose order and default action change; local and remote
// endpoints of both families relabelled and deleted; network sets with
// overlapping nets), every guarded jump's guard set holds every address
// any rule of its run can match, read from what the sink was given (the
// rules of the run's policy chains and the members of their sets), and
// the incremental state (members counted as the dataplane counts them)
// equals what a new calculator fed the same
// resources writes. At the end, with everything deleted, no set or
// chain is left.
func TestGuardsCoverTheirRuns(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { guardHistory(t, seed) })
	}
}

func guardHistory(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	pols := map[string]string{}
	eps := map[string]Endpoint{}
	sets := map[string]NetworkSet{}
	s := newRecSink()
	c := NewCalc(s, LogConfig{Group: 3})
	tierYAML := "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: sec}\nspec: {order: 50, defaultAction: Pass}\n"
	d, err := api.Decode([]byte(tierYAML))
	if err != nil {
		t.Fatal(err)
	}
	tier := d.Resources[0].(*api.Tier)
	c.SetTier(tier)

	peer := func() string {
		switch rng.IntN(8) {
		case 0:
			return ""
		case 6:
			return fmt.Sprintf("source: {notSelector: %q}", pick("team == 'x'", "app == 'b'"))
		case 7:
			return fmt.Sprintf("source: {namespaceSelector: %q, selector: %q}", pick("all()", "projectcalico.org/name == 'prod'"), pick("app == 'a'", "all()"))
		case 1:
			return fmt.Sprintf("source: {selector: %q}", pick("team == 'x'", "app == 'b'", "has(team)", "app == 'zz'"))
		case 2:
			return fmt.Sprintf("source: {nets: [%s]}", pick("10.0.0.0/28", "10.0.9.0/24", "fd00::/120", "10.0.0.5/32, fd00::7/128"))
		case 3:
			return fmt.Sprintf("destination: {selector: %q}", pick("team == 'y'", "app == 'a'"))
		case 4:
			return fmt.Sprintf("destination: {nets: [%s]}", pick("10.0.0.0/26", "fd00::/64"))
		}
		return fmt.Sprintf("source: {selector: %q, nets: [10.0.0.0/29]}, destination: {selector: \"team == 'x'\"}", pick("app == 'a'", "all()"))
	}
	setPol := func(name string) {
		var rules []string
		for range rng.IntN(4) {
			rules = append(rules, fmt.Sprintf("{action: %s, %s}", pick("Allow", "Allow", "Deny", "Pass", "Log"), peer()))
		}
		rs := "[" + strings.Join(rules, ", ") + "]"
		y := gnpYAML(name, fmt.Sprint(rng.IntN(4)), pick("default", "sec"),
			fmt.Sprintf("  selector: %s\n  types: [Ingress, Egress]\n  ingress: %s\n  egress: %s", pick("app == 'a'", "all()", "team == 'x'"), rs, rs))
		pols[name] = y
		mustPolicy(t, c, y)
	}
	setEP := func(name string) {
		i := int(name[1] - '0')
		e := ep(name, i < 4, fmt.Sprintf("10.0.0.%d", i), map[string]string{"app": pick("a", "b", "c")})
		if rng.IntN(2) == 0 {
			e.Labels["team"] = pick("x", "y")
		}
		if rng.IntN(2) == 0 {
			e.IPs = append(e.IPs, netip.MustParsePrefix(fmt.Sprintf("fd00::%d/128", i)))
		}
		eps[name] = e
		c.SetEndpoint(e)
	}
	setNetset := func(name string) {
		n := NetworkSet{Key: "gns:" + name, Labels: map[string]string{"team": pick("x", "y")}}
		// Repeats, also unmasked: the sink counts references per member.
		for _, p := range []string{"10.0.0.0/28", "10.0.0.4/30", "10.0.0.5/30", "10.0.8.0/22", "fd00::/124", "10.0.0.4/30"} {
			if rng.IntN(2) == 0 {
				n.Nets = append(n.Nets, netip.MustParsePrefix(p))
			}
		}
		sets[name] = n
		c.SetNetworkSet(n)
	}
	check := func(step int) {
		t.Helper()
		guardsCover(t, step, s)
		f := resources{tier: tier, netsets: sets, pols: pols, eps: eps}.fresh(t, LogConfig{Group: 3})
		if !reflect.DeepEqual(s.sets, f.sets) {
			t.Fatalf("step %d: sets\n%v\nfresh calculator:\n%v", step, s.sets, f.sets)
		}
		if !reflect.DeepEqual(s.chains, f.chains) || !reflect.DeepEqual(s.eps, f.eps) {
			t.Fatalf("step %d: chains %v, fresh calculator %v", step, keys(s.chains), keys(f.chains))
		}
	}

	guarded := 0
	for step := range 250 {
		switch k := rng.IntN(10); {
		case k < 4:
			setPol(fmt.Sprintf("p%d", rng.IntN(8)))
		case k == 4:
			name := fmt.Sprintf("p%d", rng.IntN(8))
			delete(pols, name)
			c.DeletePolicy("gnp:" + name)
		case k < 8:
			setEP(fmt.Sprintf("e%d", rng.IntN(10)))
		case k == 8:
			name := fmt.Sprintf("e%d", rng.IntN(10))
			delete(eps, name)
			c.DeleteEndpoint(name)
		case k == 9 && rng.IntN(4) == 0:
			// The tier moves before or after the default one and
			// switches its end between Pass and Deny.
			order := []float64{50, 5000}[rng.IntN(2)]
			tier.Spec.Order = &order
			act := api.Action(pick("Pass", "Deny"))
			tier.Spec.DefaultAction = &act
			c.SetTier(tier)
		case k == 9 && rng.IntN(3) == 0:
			name := fmt.Sprintf("n%d", rng.IntN(3))
			delete(sets, name)
			c.DeleteNetworkSet("gns:" + name)
		default:
			setNetset(fmt.Sprintf("n%d", rng.IntN(3)))
		}
		check(step)
		guarded += len(c.guards)
	}
	if guarded == 0 {
		t.Fatal("no step had a guarded run: the history tests nothing")
	}
	for name := range pols {
		c.DeletePolicy("gnp:" + name)
	}
	for name := range eps {
		c.DeleteEndpoint(name)
	}
	for name := range sets {
		c.DeleteNetworkSet("gns:" + name)
	}
	if len(s.sets) != 0 || len(s.chains) != 0 || len(c.guards) != 0 || len(c.runRefs) != 0 {
		t.Errorf("all deleted: sets %v chains %v guards %d runs %d", keys(s.sets), keys(s.chains), len(c.guards), len(c.runRefs))
	}
}

// guardsCover checks, from the sink's state alone, that each guarded
// jump's guard set covers every rule of every policy its run jumps to:
// some set the rule's peer must be in has all its members covered, or
// all the rule's peer nets are.
func guardsCover(t *testing.T, step int, s *recSink) {
	t.Helper()
	covered := func(g string, p netip.Prefix) bool {
		for m := range s.sets[g] {
			if m.Prefix.Bits() <= p.Bits() && m.Prefix.Contains(p.Addr()) {
				return true
			}
		}
		return false
	}
	for name, rules := range s.chains {
		if !strings.HasPrefix(name, "ep-") {
			continue
		}
		in := strings.HasPrefix(name, "ep-in-")
		for _, r := range rules {
			if r.Action != nftdp.ActJump || !strings.HasPrefix(r.Target, "r-") {
				continue
			}
			g := r.Dst.Sets
			if in {
				g = r.Src.Sets
			}
			if len(g) != 1 || s.sets[g[0]] == nil {
				t.Fatalf("step %d: %s jumps to run %s with guard %v (sets %v)", step, name, r.Target, g, keys(s.sets))
			}
			for _, j := range s.chains[r.Target] {
				pr, ok := s.chains[j.Target]
				if !ok {
					t.Fatalf("step %d: run %s jumps to missing chain %s", step, r.Target, j.Target)
				}
				for _, x := range pr {
					side := x.Dst
					if in {
						side = x.Src
					}
					ok := len(side.Nets) > 0
					for _, n := range side.Nets {
						ok = ok && covered(g[0], n)
					}
					for _, set := range side.Sets {
						all := true
						for m := range s.sets[set] {
							all = all && covered(g[0], m.Prefix)
						}
						ok = ok || all
					}
					if !ok {
						t.Fatalf("step %d: guard %s of %s does not cover rule %s of %s (%+v)", step, g[0], r.Target, x.ID, j.Target, side)
					}
				}
			}
		}
	}
}

// TestGuardPieces: a run of 200 guardable policies is cut into guarded
// pieces of at most maxGuardRun (a piece of one is a plain jump) that
// jump to every policy once, in order; adding a policy in the middle of the run makes one or two new
// pieces and leaves the other guards as they were.
func TestGuardPieces(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	pol := func(i int) string {
		return gnpYAML(fmt.Sprintf("p%03d", i), fmt.Sprint(i), "default",
			fmt.Sprintf("  selector: all()\n  types: [Ingress]\n  ingress: [{action: Allow, source: {selector: \"n == '%d'\"}}]", i))
	}
	for i := 0; i < 400; i += 2 {
		mustPolicy(t, c, pol(i))
	}
	c.SetEndpoint(ep("w", true, "10.0.0.1", nil))
	walk := func() (targets []string, guards map[string]bool) {
		guards = map[string]bool{}
		for _, r := range s.chains[s.eps["caliw"][1]] {
			if r.Action != nftdp.ActJump {
				continue
			}
			if !strings.HasPrefix(r.Target, "r-") {
				// a piece of one policy: a plain jump
				targets = append(targets, r.Target)
				continue
			}
			guards[r.Src.Sets[0]] = true
			run := s.chains[r.Target]
			if len(run) < minGuardRun || len(run) > maxGuardRun {
				t.Errorf("piece %s of %d policies", r.Target, len(run))
			}
			for _, j := range run {
				targets = append(targets, j.Target)
			}
		}
		return targets, guards
	}
	targets, before := walk()
	if len(targets) != 200 || !slices.IsSortedFunc(targets, strings.Compare) || len(before) < 200/maxGuardRun+1 {
		t.Fatalf("%d jumps in %d pieces, sorted %v", len(targets), len(before), slices.IsSorted(targets))
	}
	mustPolicy(t, c, pol(201))
	targets, after := walk()
	if len(targets) != 201 || !slices.IsSortedFunc(targets, strings.Compare) {
		t.Fatalf("after adding one: %d jumps", len(targets))
	}
	var gone, made int
	for g := range before {
		if !after[g] {
			gone++
		}
	}
	for g := range after {
		if !before[g] {
			made++
		}
	}
	if gone > 1 || made > 2 || made == 0 {
		t.Errorf("adding one policy replaced %d guards by %d (of %d)", gone, made, len(before))
	}
	t.Logf("%d pieces; adding one policy: %d guards gone, %d made", len(before), gone, made)
}

// TestRepeatedMembersLeaveNothing: a network set listing a net twice
// (once unmasked) and then once gives its set and the guard over it one
// reference, so deleting it leaves neither holding the net (a leaked
// reference kept a deleted set's nets allowed or denied, and a guard
// made later lacked them).
func TestRepeatedMembersLeaveNothing(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	for i, sel := range []string{"role == 'x'", "role == 'y'"} {
		mustPolicy(t, c, gnpYAML(fmt.Sprintf("p%d", i), fmt.Sprint(i), "default",
			"  selector: all()\n  types: [Ingress]\n  ingress: [{action: Deny, source: {selector: \""+sel+"\"}}]"))
	}
	c.SetEndpoint(ep("w", true, "10.0.0.1", nil))
	ns := func(nets ...string) NetworkSet {
		n := NetworkSet{Key: "gns:n", Labels: map[string]string{"role": "x"}}
		for _, p := range nets {
			n.Nets = append(n.Nets, netip.MustParsePrefix(p))
		}
		return n
	}
	c.SetNetworkSet(ns("10.9.0.0/24", "10.9.0.7/24", "10.9.0.0/24"))
	c.SetNetworkSet(ns("10.9.0.0/24"))
	if len(c.guards) != 1 {
		t.Fatalf("%d guards, want 1", len(c.guards))
	}
	x := nftdp.Member{Prefix: netip.MustParsePrefix("10.9.0.0/24")}
	holding := 0
	for name, members := range s.sets {
		if members[x] > 1 {
			t.Errorf("set %s holds %v %d times, want once", name, x.Prefix, members[x])
		}
		holding += members[x]
	}
	if holding != 2 {
		t.Errorf("%d sets hold %v, want role == 'x''s and the guard", holding, x.Prefix)
	}
	c.DeleteNetworkSet("gns:n")
	for name, members := range s.sets {
		if len(members) != 0 {
			t.Errorf("network set deleted: set %s still holds %v", name, members)
		}
	}
}
