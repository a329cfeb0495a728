package nftdp

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/internal/nftprefix"
)

var log = logrus.WithField("component", "policy-dataplane")

// famTable is one family's table as the kernel has it, as far as this
// package knows: read back in full when loaded is false, then kept up to
// date by every successful transaction.
type famTable struct {
	fam    *family
	table  *nftables.Table
	rd     renderer
	loaded bool

	tableExists bool
	chains      map[string]*chainHave
	sets        map[string]*setHave
	ifaces      map[string]map[string]string // FromWLIfaces/ToWLIfaces -> interface -> chain
	// legacy are maps of an earlier version's dispatch, to delete once
	// the rules using them are replaced.
	legacy []string

	// What leads to each regular chain in this family, and which sets
	// the chains in this family's table use (see reach.go).
	jumps   map[string][]string
	inRefs  map[string]int
	uses    map[string][]string
	setRefs map[string]int
}

type chainHave struct {
	keys []string
	hook string // "" for regular chains
}

type setHave struct {
	kind     SetKind
	interval bool // an interval set; else a hash set of single addresses
	elems    memberMap[struct{}]
}

func (h *hook) String() string {
	if h == nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", *h.num, *h.prio)
}

// txn counts the operations queued in one transaction.
type txn struct {
	c    *nftables.Conn
	n    int
	what []string // at debug level only
}

func (t *txn) note(format string, args ...any) {
	t.n++
	if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		t.what = append(t.what, fmt.Sprintf(format, args...))
	}
}

// elemChunk is how many elements go in one netlink message: a message's
// element list is one attribute, whose length field has 16 bits.
const elemChunk = 512

// elements queues adding (or deleting) set elements, a chunk per
// message; the chunks still go in the one transaction. An interval's
// start and end elements stay in the same chunk.
func (t *txn) elements(s *nftables.Set, els []nftables.SetElement, del bool) error {
	for len(els) > 0 {
		n := min(len(els), elemChunk)
		if n < len(els) && els[n].IntervalEnd {
			n++
		}
		var err error
		if del {
			err = t.c.SetDeleteElements(s, els[:n])
		} else {
			err = t.c.SetAddElements(s, els[:n])
		}
		if err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}

// applyFamily writes one family's differences in one transaction.
func (d *Dataplane) applyFamily(ft *famTable, full bool) error {
	t := &txn{c: d.conn}
	if !ft.tableExists {
		t.c.AddTable(ft.table)
		t.note("add table")
		ft.tableExists = true
	}
	if err := ft.addDispatchMaps(t); err != nil {
		return err
	}

	chainNames, usedSets := d.reachChanges(ft, full)
	setNames := union(keysOf(d.dirtySets), usedSets)
	epNames := keysOf(d.dirtyEndpoints)
	if full {
		setNames = union(keysOf(d.sets), keysOf(ft.sets))
		chainNames = union(keysOf(d.chains), keysOf(ft.chains))
		epNames = union(keysOf(d.endpoints), keysOf(ft.ifaces[FromWLIfaces]), keysOf(ft.ifaces[ToWLIfaces]))
	}

	// An address set whose kernel flavour (interval or plain hash, see
	// syncSet) must change is made anew under its name, and every chain
	// that looks it up is refilled: the kernel refuses to delete a set
	// a rule uses, and all of it is one transaction, so no packet meets
	// the table in between.
	remade := ft.remadeSets(d, setNames)
	if len(remade) > 0 {
		chainNames = union(chainNames, d.chainsUsing(remade))
	}

	// Chains are flushed before any set changes (a remade set must lose
	// its users first), new chains exist before any rule jumps to them,
	// changed chains are refilled after the sets they use are in place,
	// and gone chains are deleted last, once nothing refers to them.
	var add, fill, del []string
	for _, name := range chainNames {
		want, have := d.wantIn(ft, name), ft.chains[name]
		switch {
		case want == nil && have != nil:
			t.c.FlushChain(&nftables.Chain{Table: ft.table, Name: name})
			t.note("flush gone chain %s", name)
			del = append(del, name)
		case want != nil && have != nil && have.hook != want.hook.String():
			// A base chain with the wrong hook: make it anew.
			c := &nftables.Chain{Table: ft.table, Name: name}
			t.c.FlushChain(c)
			t.c.DelChain(c)
			t.note("remake base chain %s (hook %s, want %s)", name, have.hook, want.hook)
			delete(ft.chains, name)
			add = append(add, name)
		case want != nil && have == nil:
			add = append(add, name)
		case want != nil && (usesAny(want, remade) || !slices.Equal(have.keys, ft.keysFor(want))):
			t.c.FlushChain(&nftables.Chain{Table: ft.table, Name: name})
			t.note("refill chain %s", name)
			fill = append(fill, name)
		}
	}

	var delSets []string
	for _, name := range setNames {
		want, have := d.wantSetIn(ft, name), ft.sets[name]
		if want == nil {
			if have != nil {
				delSets = append(delSets, name)
			}
			continue
		}
		if err := d.syncSet(t, ft, name, want, full, remade[name]); err != nil {
			return err
		}
	}

	for _, name := range add {
		want := d.chains[name]
		c := &nftables.Chain{Table: ft.table, Name: name}
		if want.hook != nil {
			c.Type, c.Hooknum, c.Priority = nftables.ChainTypeFilter, want.hook.num, want.hook.prio
		}
		t.c.AddChain(c)
		t.note("add chain %s", name)
		ft.chains[name] = &chainHave{hook: want.hook.String()}
	}
	for _, name := range append(add, fill...) {
		if err := d.fillChain(t, ft, name, d.chains[name]); err != nil {
			return err
		}
	}

	if err := d.syncDispatch(t, ft, epNames); err != nil {
		return err
	}

	for _, name := range del {
		t.c.DelChain(&nftables.Chain{Table: ft.table, Name: name})
		t.note("delete chain %s", name)
		delete(ft.chains, name)
	}
	ft.dropLegacy(t)
	for _, name := range delSets {
		t.c.DelSet(&nftables.Set{Table: ft.table, Name: name})
		t.note("delete set %s", name)
		delete(ft.sets, name)
	}
	if t.n == 0 {
		return nil
	}
	d.writes++
	if len(t.what) > 0 {
		log.WithFields(logrus.Fields{"family": ft.fam.name, "ops": t.what}).Debug("writing")
	}
	if err := t.c.Flush(); err != nil {
		return fmt.Errorf("nftdp: writing table %s %s (%d operations): %w", ft.fam.name, ft.table.Name, t.n, err)
	}
	return nil
}

// wantSetIn is set name as ft's table should have it: nil when it is not
// wanted or no chain in ft's table uses it.
func (d *Dataplane) wantSetIn(ft *famTable, name string) *setWant {
	if ft.setRefs[name] == 0 {
		return nil
	}
	return d.sets[name]
}

// keysFor lists the keys of a chain's rules that exist in ft's family.
func (ft *famTable) keysFor(c *chainWant) []string {
	out := make([]string, 0, len(c.keys))
	for i := range c.rules {
		if ft.fam.applies(&c.rules[i]) {
			out = append(out, c.keys[i])
		}
	}
	return out
}

func (d *Dataplane) fillChain(t *txn, ft *famTable, name string, want *chainWant) error {
	ch := &nftables.Chain{Table: ft.table, Name: name}
	anon := func(s *nftables.Set, els []nftables.SetElement) error {
		t.n++ // anonymous sets come with their rule
		return t.c.AddSet(s, els)
	}
	keys := make([]string, 0, len(want.rules))
	for i := range want.rules {
		ex, ok, err := ft.rd.render(&want.rules[i], anon)
		if err != nil {
			return fmt.Errorf("nftdp: %s chain %s rule %d: %w", ft.fam.name, name, i, err)
		}
		if !ok {
			continue
		}
		t.c.AddRule(&nftables.Rule{Table: ft.table, Chain: ch, Exprs: ex, UserData: comment(want.keys[i])})
		t.n++ // the chain's refill was noted
		keys = append(keys, want.keys[i])
	}
	ft.chains[name].keys = keys
	return nil
}

// syncSet creates a set if needed and writes the elements that differ:
// all of them when full, when the set is new or remade, or when it holds
// nets (a net may cover other members), else only the members marked
// dirty. An address set holding only single addresses in this family is
// a plain hash set, which the kernel looks up in constant time; one with
// a net needs an interval set (a tree). remake deletes the kernel's set
// and adds it anew with the wanted flavour; its users must have been
// flushed earlier in the transaction.
func (d *Dataplane) syncSet(t *txn, ft *famTable, name string, want *setWant, full, remake bool) error {
	f := ft.fam
	interval := ft.interval(want)
	s := &nftables.Set{Table: ft.table, Name: name}
	switch want.kind {
	case AddrSet:
		s.KeyType, s.Interval = f.addrType, interval
	case NamedPortSet:
		s.KeyType, s.Concatenation = f.namedPortType, true
	}
	have := ft.sets[name]
	if have != nil && have.kind != want.kind {
		return fmt.Errorf("nftdp: %s set %s: kind changed from %d to %d; sets are named by what they hold", f.name, name, have.kind, want.kind)
	}
	if have != nil && remake {
		t.c.DelSet(&nftables.Set{Table: ft.table, Name: name})
		t.note("remake set %s (interval %v)", name, interval)
		delete(ft.sets, name)
		have = nil
	}
	if have == nil {
		if err := t.c.AddSet(s, nil); err != nil {
			return fmt.Errorf("nftdp: %s set %s: %w", f.name, name, err)
		}
		t.note("add set %s", name)
		have = &setHave{kind: want.kind, interval: interval}
		ft.sets[name] = have
		full = true
	}
	dirty, partial := d.dirtySets[name]
	var add, del []mkey
	if full || !partial || dirty == nil || interval {
		wantElems := ft.wantElems(want)
		for k := range have.elems.all() {
			if !wantElems[k] {
				del = append(del, k)
			}
		}
		for k := range wantElems {
			if !have.elems.has(k) {
				add = append(add, k)
			}
		}
	} else {
		for k := range dirty {
			if !k.in(f) {
				continue
			}
			n, _ := want.members.get(k)
			switch w := n > 0; {
			case w && !have.elems.has(k):
				add = append(add, k)
			case !w && have.elems.has(k):
				del = append(del, k)
			}
		}
	}
	if len(del) > 0 {
		ms := membersOf(del)
		if err := t.elements(s, elemsOf(want.kind, interval, ms), true); err != nil {
			return fmt.Errorf("nftdp: %s set %s: %w", f.name, name, err)
		}
		t.note("set %s: delete %v", name, ms)
	}
	if len(add) > 0 {
		ms := membersOf(add)
		if err := t.elements(s, elemsOf(want.kind, interval, ms), false); err != nil {
			return fmt.Errorf("nftdp: %s set %s: %w", f.name, name, err)
		}
		t.note("set %s: add %v", name, ms)
	}
	for _, m := range del {
		have.elems.del(m)
	}
	for _, m := range add {
		have.elems.put(m, struct{}{})
	}
	return nil
}

// wantElems is what a set should hold in ft's family: its members, and
// in an address set without those another member covers.
func (ft *famTable) wantElems(want *setWant) map[mkey]bool {
	out := make(map[mkey]bool, want.members.len())
	if ft.interval(want) {
		var ps []netip.Prefix
		for k := range want.members.all() {
			if k.in(ft.fam) {
				ps = append(ps, k.member().Prefix)
			}
		}
		for _, p := range nftprefix.DropCovered(ps) {
			out[Member{Prefix: p}.key()] = true
		}
		return out
	}
	for k := range want.members.all() {
		if k.in(ft.fam) {
			out[k] = true
		}
	}
	return out
}

// elemsOf is members as the kernel's elements: an interval set's
// prefixes as start and end, a hash set's addresses as themselves.
func elemsOf(kind SetKind, interval bool, ms []Member) []nftables.SetElement {
	var out []nftables.SetElement
	for _, m := range ms {
		switch {
		case kind == NamedPortSet:
			out = append(out, nftables.SetElement{Key: namedPortKey(m)})
		case interval:
			out = append(out, nftprefix.Elements(m.Prefix)...)
		default:
			out = append(out, nftables.SetElement{Key: m.Prefix.Addr().AsSlice()})
		}
	}
	return out
}

// interval reports whether an address set is an interval set in ft's
// family: only while it holds a net of that family.
func (ft *famTable) interval(want *setWant) bool {
	return want.kind == AddrSet && want.nets[ft.fam.idx()] > 0
}

// remadeSets are the sets among names that the kernel has with the
// other flavour than wanted.
func (ft *famTable) remadeSets(d *Dataplane, names []string) map[string]bool {
	out := map[string]bool{}
	for _, name := range names {
		want, have := d.wantSetIn(ft, name), ft.sets[name]
		if want != nil && have != nil && have.kind == want.kind && have.interval != ft.interval(want) {
			out[name] = true
		}
	}
	return out
}

// chainsUsing lists the wanted chains whose rules look up any of sets.
func (d *Dataplane) chainsUsing(sets map[string]bool) []string {
	var out []string
	for name, c := range d.chains {
		if usesAny(c, sets) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// usesAny reports whether a chain's rules look up any of the address
// sets.
func usesAny(c *chainWant, sets map[string]bool) bool {
	if len(sets) == 0 {
		return false
	}
	for i := range c.rules {
		for _, sd := range []*Side{&c.rules[i].Src, &c.rules[i].Dst} {
			for _, n := range sd.Sets {
				if sets[n] {
					return true
				}
			}
			for _, n := range sd.NotSets {
				if sets[n] {
					return true
				}
			}
		}
	}
	return false
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func union(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
