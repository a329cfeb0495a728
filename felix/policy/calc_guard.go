package policy

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// Guards: skipping, with one lookup, policies a new flow cannot match.
//
// A new flow walks an endpoint's policies one jump at a time until one
// decides; under 200 policies that walk made a new connection cost four
// times what it costs under none (docs/experiments/policy-walk). Most
// policies match only peers in some selector's set or in some nets: the
// source of what the endpoint receives, the destination of what it
// sends. A run of such policies in one tier is cut into pieces (see
// endsGuardRun); each piece goes in a chain of its own, and the endpoint
// chain jumps there only when the peer's address is in the piece's
// guard set, which holds every member of those sets and those nets. A
// peer outside the guard matches no rule in the piece (no Allow, Deny,
// Pass or Log), so skipping the piece gives the verdict walking it
// would.
//
// The guard must never lack an address one of its sets has, or a Deny
// would be skipped: it is filled by the calls that fill its sets (see
// contribute), so both change in the same Apply, which writes each
// family in one transaction. It holds a reference on each of its sets,
// so they outlive it.

// minGuardRun is the fewest policies a guard is made for: one lookup
// in place of one jump saves nothing worth a set.
const minGuardRun = 2

// guardSpec is what a guard set holds: the members of sets and nets.
type guardSpec struct {
	name string
	sets []setSpec // sorted by name, no repeats
	nets []netip.Prefix
}

// guardRun is a run of guarded policies: its chain (the jumps to the
// policies' chains) and its guard.
type guardRun struct {
	chain   string
	targets []string
	guard   guardSpec
}

// guard is a guard set the calculator has made, with the endpoint
// chains' runs that use it counted.
type guard struct {
	spec guardSpec
	refs int
}

// peerGuard returns what a packet's peer must be in for some rule of p
// in that direction to match it: per rule, its peer-side selector's set
// or else its peer-side nets (a rule needs both when it has both, so
// either one covers it). ok is false when some rule has neither.
func (p *cpolicy) peerGuard(in bool) (sets []setSpec, nets []netip.Prefix, ok bool) {
	for _, r := range p.rules(in) {
		s := &r.dst
		if in {
			s = &r.src
		}
		switch {
		case s.sel != nil:
			sets = append(sets, addrSet(s.sel))
		case len(s.nets) > 0:
			nets = append(nets, s.nets...)
		default:
			return nil, nil, false
		}
	}
	return sets, nets, true
}

// sameGuards reports whether two versions of a policy need the same
// guard in both directions (then a rule edit leaves every run's guard
// as it is).
func sameGuards(a, b *cpolicy) bool {
	for _, in := range []bool{true, false} {
		sa, na, oka := a.peerGuard(in)
		sb, nb, okb := b.peerGuard(in)
		if oka != okb || !slices.Equal(setNames(sa), setNames(sb)) || !slices.Equal(sortedNets(na), sortedNets(nb)) {
			return false
		}
	}
	return true
}

func setNames(specs []setSpec) []string {
	out := make([]string, 0, len(specs))
	for _, s := range specs {
		out = append(out, s.name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedNets(ns []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ns)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// reguard re-renders the endpoints p selects whose chains a change of
// p's guard changes (those where p is in a guarded run).
func (c *Calc) reguard(p *cpolicy) {
	for k := range p.selected {
		l := c.locals[k]
		if l == nil {
			c.rehost(k)
			continue
		}
		for i, in := range []bool{false, true} {
			if name, _, _, _ := c.endpointChain(l.ep, l.in, l.out, in); name != l.chains[i] {
				c.renderEndpoint(l)
				break
			}
		}
	}
}

// tierJumps are the jumps of one tier's policies (pols) in an endpoint
// chain: runs of guardable policies cut into pieces (see endsGuardRun),
// each piece of at least minGuardRun policies behind its guard
// (appended to runs), the other policies one jump each.
func tierJumps(pols []*cpolicy, in bool, runs *[]guardRun) []nftdp.Rule {
	var out []nftdp.Rule
	var run []*cpolicy // guardable, not yet written
	flush := func() {
		if len(run) < minGuardRun {
			for _, p := range run {
				out = append(out, nftdp.Rule{IfPassClear: true, Action: nftdp.ActJump, Target: p.chain(in)})
			}
			run = run[:0]
			return
		}
		r := newGuardRun(run, in)
		*runs = append(*runs, r)
		j := nftdp.Rule{IfPassClear: true, Action: nftdp.ActJump, Target: r.chain}
		side := nftdp.Side{Sets: []string{r.guard.name}}
		if in {
			j.Src = side
		} else {
			j.Dst = side
		}
		out = append(out, j)
		run = run[:0]
	}
	for _, p := range pols {
		if _, _, ok := p.peerGuard(in); !ok {
			flush()
			out = append(out, nftdp.Rule{IfPassClear: true, Action: nftdp.ActJump, Target: p.chain(in)})
			continue
		}
		run = append(run, p)
		if len(run) == maxGuardRun || endsGuardRun(p, in) {
			flush()
		}
	}
	flush()
	return out
}

// Guarded runs are cut into pieces of about guardSpread policies, at
// most maxGuardRun: a flow then costs one lookup per piece before the
// one whose guard holds its peer, and a jump per policy of that piece,
// not a walk of the whole run (about 2*sqrt(n) steps for n policies).
// A piece ends after a policy whose chain name hashes to a multiple of
// guardSpread, so adding or removing a policy changes the pieces around
// it only, not every guard of the run.
const (
	guardSpread = 16
	maxGuardRun = 64
)

func endsGuardRun(p *cpolicy, in bool) bool {
	h := fnv.New32a()
	h.Write([]byte(p.chain(in)))
	return h.Sum32()%guardSpread == 0
}

func newGuardRun(pols []*cpolicy, in bool) guardRun {
	var r guardRun
	var sets []setSpec
	var nets []netip.Prefix
	for _, p := range pols {
		r.targets = append(r.targets, p.chain(in))
		s, n, _ := p.peerGuard(in)
		sets, nets = append(sets, s...), append(nets, n...)
	}
	r.chain = hashName("r-", strings.Join(r.targets, " "))
	slices.SortFunc(sets, func(a, b setSpec) int { return strings.Compare(a.name, b.name) })
	sets = slices.CompactFunc(sets, func(a, b setSpec) bool { return a.name == b.name })
	nets = sortedNets(nets)
	id := strings.Join(setNames(sets), " ")
	for _, n := range nets {
		id += " " + n.String()
	}
	r.guard = guardSpec{name: hashName("g-", id), sets: sets, nets: nets}
	return r
}

// rules are a run chain's rules: a jump to each policy while no Pass
// was seen.
func (r guardRun) rules() []nftdp.Rule {
	out := make([]nftdp.Rule, 0, len(r.targets))
	for _, t := range r.targets {
		out = append(out, nftdp.Rule{IfPassClear: true, Action: nftdp.ActJump, Target: t})
	}
	return out
}

// refRuns takes a reference on each run's chain and guard, writing
// those that are new.
func (c *Calc) refRuns(runs []guardRun) {
	for _, r := range runs {
		if c.runRefs[r.chain]++; c.runRefs[r.chain] == 1 {
			c.setChain(r.chain, r.rules(), map[string]RuleInfo{})
		}
		g := c.guards[r.guard.name]
		if g == nil {
			g = &guard{spec: r.guard}
			c.guards[r.guard.name] = g
			c.makeGuard(r.guard)
		}
		g.refs++
	}
}

// unrefRuns drops the references refRuns took, deleting what is no
// longer used.
func (c *Calc) unrefRuns(runs []guardRun) {
	for _, r := range runs {
		if c.runRefs[r.chain]--; c.runRefs[r.chain] <= 0 {
			delete(c.runRefs, r.chain)
			c.deleteChain(r.chain)
		}
		g := c.guards[r.guard.name]
		if g == nil {
			continue
		}
		if g.refs--; g.refs <= 0 {
			delete(c.guards, r.guard.name)
			c.dropGuard(g.spec)
		}
	}
}

// makeGuard creates a guard set filled from its sets and nets; the sets
// feed it from then on.
func (c *Calc) makeGuard(g guardSpec) {
	c.refSets(g.sets)
	c.sink.AddSet(g.name, nftdp.AddrSet)
	for _, sp := range g.sets {
		s := c.sets[sp.name]
		s.feeds = append(s.feeds, g.name)
		c.eachMember(s, func(m nftdp.Member) { c.sink.AddMember(g.name, m) })
	}
	for _, n := range g.nets {
		c.sink.AddMember(g.name, nftdp.Member{Prefix: n})
	}
}

func (c *Calc) dropGuard(g guardSpec) {
	for _, sp := range g.sets {
		if s := c.sets[sp.name]; s != nil {
			s.feeds = slices.DeleteFunc(s.feeds, func(n string) bool { return n == g.name })
		}
	}
	c.sink.DeleteSet(g.name)
	c.unrefSets(g.sets)
}
