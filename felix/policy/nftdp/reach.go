package nftdp

import "slices"

// A regular chain is in a family's table only while something there
// leads to it: a base chain, an endpoint dispatched to it in that family
// (an endpoint is dispatched only in the tables of its Families), or a
// jump that applies in that family from a chain in the table. So in a
// single-stack cluster the other table holds only the base chains: a
// policy edit or a new local pod is then one transaction, not two, and
// each commit (which validates every chain its table's base chains
// lead to) has half the chains to walk.
//
// famTable.jumps and famTable.inRefs hold, per family, the jumps counted
// and how many lead to each chain. They describe the desired state and
// are updated before each transaction; a failed transaction makes the
// family's next Apply a full one, which counts them anew.

// reachable reports whether chain name belongs in ft's table.
func (d *Dataplane) reachable(ft *famTable, name string) bool {
	c := d.chains[name]
	return c != nil && (c.hook != nil || d.famRefs[ft.fam.idx()][name] > 0 || ft.inRefs[name] > 0)
}

// wantIn is chain name as ft's table should have it: nil when it is not
// wanted or nothing in this family leads to it.
func (d *Dataplane) wantIn(ft *famTable, name string) *chainWant {
	if !d.reachable(ft, name) {
		return nil
	}
	return d.chains[name]
}

// jumpTargets lists the targets of c's jumps that apply in ft's family.
func (ft *famTable) jumpTargets(c *chainWant) []string {
	var out []string
	for i := range c.rules {
		if r := &c.rules[i]; ft.fam.applies(r) {
			if r.jumps() {
				out = append(out, r.Target)
			} else if r.tailed() {
				out = append(out, r.tailName())
			}
		}
	}
	return out
}

// setsUsed lists the named sets c's rules that apply in ft's family look
// up, sorted, without repeats.
func (ft *famTable) setsUsed(c *chainWant) []string {
	var out []string
	for i := range c.rules {
		r := &c.rules[i]
		if !ft.fam.applies(r) {
			continue
		}
		for _, sd := range []*Side{&r.Src, &r.Dst} {
			out = append(out, sd.Sets...)
			out = append(out, sd.NotSets...)
			out = append(out, sd.NotNamedPortSets...)
			if sd.NamedPortSet != "" {
				out = append(out, sd.NamedPortSet)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// useSets records which sets chain name uses in ft's table (none when it
// is not there), counting the users of each set; a set whose count
// leaves or reaches 0 is added to changed. A set is in a family's table
// only while a chain there uses it, so a set only IPv4 rules use is not
// written to the ip6 table at all.
func (d *Dataplane) useSets(ft *famTable, name string, changed map[string]bool) {
	var sets []string
	if d.reachable(ft, name) {
		sets = ft.setsUsed(d.chains[name])
	}
	old := ft.uses[name]
	if slices.Equal(old, sets) {
		return
	}
	if len(sets) == 0 {
		delete(ft.uses, name)
	} else {
		ft.uses[name] = sets
	}
	for _, s := range old {
		if ft.setRefs[s]--; ft.setRefs[s] <= 0 {
			delete(ft.setRefs, s)
			changed[s] = true
		}
	}
	for _, s := range sets {
		if ft.setRefs[s]++; ft.setRefs[s] == 1 {
			changed[s] = true
		}
	}
}

// reach recounts the jumps of chain name in ft's family and, for every
// chain that becomes reachable or unreachable thereby, its jumps in
// turn; each such chain is added to changed. Jumps cannot form loops
// (the kernel refuses them, and checkRefs runs first), and a chain's
// jumps are recorded before recursing, so this ends.
func (d *Dataplane) reach(ft *famTable, name string, changed, sets map[string]bool) {
	d.useSets(ft, name, sets)
	var targets []string
	if d.reachable(ft, name) {
		targets = ft.jumpTargets(d.chains[name])
	}
	old := ft.jumps[name]
	if slices.Equal(old, targets) {
		return
	}
	if len(targets) == 0 {
		delete(ft.jumps, name)
	} else {
		ft.jumps[name] = targets
	}
	for _, t := range old {
		if ft.inRefs[t]--; ft.inRefs[t] <= 0 {
			delete(ft.inRefs, t)
			changed[t] = true
			d.reach(ft, t, changed, sets)
		}
	}
	for _, t := range targets {
		if ft.inRefs[t]++; ft.inRefs[t] == 1 {
			changed[t] = true
			d.reach(ft, t, changed, sets)
		}
	}
}

// reachChanges updates ft's reachability and set users for what changed
// since the last Apply (all of it when full) and returns the chains
// whose reachability or content may differ and the sets whose presence
// in ft's table may.
func (d *Dataplane) reachChanges(ft *famTable, full bool) (chains, sets []string) {
	changed, setsChanged := map[string]bool{}, map[string]bool{}
	if full {
		ft.jumps, ft.inRefs = map[string][]string{}, map[string]int{}
		ft.uses, ft.setRefs = map[string][]string{}, map[string]int{}
		for name := range d.chains {
			d.reach(ft, name, changed, setsChanged)
		}
		return keysOf(changed), keysOf(setsChanged)
	}
	for name := range d.dirtyChains {
		changed[name] = true
		d.reach(ft, name, changed, setsChanged)
	}
	for name := range d.dirtyRoots {
		changed[name] = true
		d.reach(ft, name, changed, setsChanged)
	}
	return keysOf(changed), keysOf(setsChanged)
}
