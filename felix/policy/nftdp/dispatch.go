package nftdp

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// epWant is where an endpoint's traffic goes: the chain for what it
// sends and the chain for what it receives, in the tables of fams.
type epWant struct {
	from, to string
	fams     Families
}

// idChanges says which ids ChainDispatch may have wrong: all of them
// (a table was read back), or those of chains.
type idChanges struct {
	all    bool
	chains []string
}

// assignIDs gives every chain an endpoint is dispatched to an id in
// ChainDispatch, keeping the ids the kernel already has (so a restarted
// process rewrites nothing) and freeing those of chains no longer used.
func (d *Dataplane) assignIDs() {
	used := d.epRefs
	taken := map[uint32]bool{}
	for c, id := range d.ids {
		if used[c] == 0 {
			delete(d.ids, c)
		} else {
			taken[id] = true
		}
	}
	for _, ft := range d.fams {
		for id, c := range ft.lists {
			if _, ok := d.ids[c]; !ok && used[c] > 0 && !taken[id] && id != 0 {
				d.ids[c], taken[id] = id, true
			}
		}
	}
	next := uint32(1)
	for _, c := range keysOf(used) {
		if _, ok := d.ids[c]; ok {
			continue
		}
		for taken[next] {
			next++
		}
		d.ids[c], taken[next] = next, true
	}
	d.taken = taken
}

// assignIDsOf is assignIDs for the chains endpoints began or ceased to
// use (sorted), when every table's ChainDispatch equals d.ids: a freed
// id is remembered for syncDispatch to delete, a new chain takes the
// lowest free id.
func (d *Dataplane) assignIDsOf(chains []string) {
	for _, c := range chains {
		if id, ok := d.ids[c]; ok && d.epRefs[c] == 0 {
			delete(d.ids, c)
			delete(d.taken, id)
			d.freedIDs[c] = id
		}
	}
	next := uint32(1)
	for _, c := range chains {
		if _, ok := d.ids[c]; ok || d.epRefs[c] == 0 {
			continue
		}
		for d.taken[next] {
			next++
		}
		d.ids[c], d.taken[next] = next, true
	}
}

func (ft *famTable) ifaceMap(name string) *nftables.Set {
	return &nftables.Set{Table: ft.table, Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeInteger}
}

func (ft *famTable) chainMap() *nftables.Set {
	return &nftables.Set{Table: ft.table, Name: ChainDispatch, IsMap: true, KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
}

func (ft *famTable) addDispatchMaps(t *txn) error {
	for _, m := range []string{FromWLIfaces, ToWLIfaces} {
		if _, ok := ft.ifaces[m]; !ok {
			if err := t.c.AddSet(ft.ifaceMap(m), nil); err != nil {
				return fmt.Errorf("nftdp: %s map %s: %w", ft.fam.name, m, err)
			}
			t.note("add map %s", m)
			ft.ifaces[m] = map[string]uint32{}
		}
	}
	if !ft.hasDispatch {
		if err := t.c.AddSet(ft.chainMap(), nil); err != nil {
			return fmt.Errorf("nftdp: %s map %s: %w", ft.fam.name, ChainDispatch, err)
		}
		t.note("add map %s", ChainDispatch)
		ft.hasDispatch = true
	}
	return nil
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// syncDispatch writes ChainDispatch's new ids (those ids says may have
// changed) for the chains endpoints of ft's family are dispatched to,
// then the interface maps of the given interfaces, then removes ids no
// longer used in this family (whose chains may be deleted after this,
// in the same transaction).
func (d *Dataplane) syncDispatch(t *txn, ft *famTable, ifaces []string, ids idChanges) error {
	cm := ft.chainMap()
	refs := d.famRefs[ft.fam.idx()]
	var add, del []nftables.SetElement
	put := func(c string, id uint32) {
		if refs[c] == 0 {
			return
		}
		if have, ok := ft.lists[id]; ok && have == c {
			return
		} else if ok {
			del = append(del, nftables.SetElement{Key: be32(id)})
		}
		add = append(add, nftables.SetElement{Key: be32(id), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: c}})
		ft.lists[id] = c
	}
	if ids.all {
		for c, id := range d.ids {
			put(c, id)
		}
	} else {
		for _, c := range ids.chains {
			if id, ok := d.ids[c]; ok {
				put(c, id)
			}
		}
	}
	if err := t.mapOps(cm, del, add, ft.fam.name); err != nil {
		return err
	}
	for _, m := range []string{FromWLIfaces, ToWLIfaces} {
		have := ft.ifaces[m]
		var add, del []nftables.SetElement
		for _, ifc := range ifaces {
			want := uint32(0)
			if w, ok := d.endpoints[ifc]; ok && w.fams.has(ft.fam.idx()) {
				want = d.ids[w.from]
				if m == ToWLIfaces {
					want = d.ids[w.to]
				}
			}
			got, ok := have[ifc]
			if ok && got == want {
				continue
			}
			if ok {
				del = append(del, nftables.SetElement{Key: ifnameKey(ifc)})
				delete(have, ifc)
			}
			if want != 0 {
				add = append(add, nftables.SetElement{Key: ifnameKey(ifc), Val: be32(want)})
				have[ifc] = want
			}
		}
		if err := t.mapOps(ft.ifaceMap(m), del, add, ft.fam.name); err != nil {
			return err
		}
	}
	// An id goes from this family's ChainDispatch when its chain has
	// another id or none (freed), or when no endpoint of this family
	// is dispatched to it any more.
	var gone []nftables.SetElement
	drop := func(id uint32) {
		if c, ok := ft.lists[id]; ok && (d.ids[c] != id || refs[c] == 0) {
			gone = append(gone, nftables.SetElement{Key: be32(id)})
			delete(ft.lists, id)
		}
	}
	if ids.all {
		for _, id := range slices.Sorted(maps.Keys(ft.lists)) {
			drop(id)
		}
	} else {
		cand := slices.Collect(maps.Values(d.freedIDs))
		for _, c := range ids.chains {
			if id, ok := d.ids[c]; ok && refs[c] == 0 {
				cand = append(cand, id)
			}
		}
		slices.Sort(cand)
		for _, id := range slices.Compact(cand) {
			drop(id)
		}
	}
	return t.mapOps(cm, gone, nil, ft.fam.name)
}

func (t *txn) mapOps(m *nftables.Set, del, add []nftables.SetElement, fam string) error {
	if len(del) > 0 {
		if err := t.elements(m, del, true); err != nil {
			return fmt.Errorf("nftdp: %s map %s: %w", fam, m.Name, err)
		}
		t.note("map %s: delete %d", m.Name, len(del))
	}
	if len(add) > 0 {
		if err := t.elements(m, add, false); err != nil {
			return fmt.Errorf("nftdp: %s map %s: %w", fam, m.Name, err)
		}
		t.note("map %s: add %d", m.Name, len(add))
	}
	return nil
}
