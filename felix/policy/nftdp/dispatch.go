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
// sends and the chain for what it receives.
type epWant struct{ from, to string }

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

// syncDispatch writes ChainDispatch's new ids (when ids says they may
// have changed), then the interface maps of the given interfaces, then
// removes ids no longer used (whose chains may be deleted after this,
// in the same transaction).
func (d *Dataplane) syncDispatch(t *txn, ft *famTable, ifaces []string, ids bool) error {
	cm := ft.chainMap()
	if ids {
		var add, del []nftables.SetElement
		for c, id := range d.ids {
			if have, ok := ft.lists[id]; ok && have == c {
				continue
			} else if ok {
				del = append(del, nftables.SetElement{Key: be32(id)})
			}
			add = append(add, nftables.SetElement{Key: be32(id), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: c}})
			ft.lists[id] = c
		}
		if err := t.mapOps(cm, del, add, ft.fam.name); err != nil {
			return err
		}
	}
	for _, m := range []string{FromWLIfaces, ToWLIfaces} {
		have := ft.ifaces[m]
		var add, del []nftables.SetElement
		for _, ifc := range ifaces {
			want := uint32(0)
			if w, ok := d.endpoints[ifc]; ok {
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
	if !ids {
		return nil
	}
	var gone []nftables.SetElement
	for _, id := range slices.Sorted(maps.Keys(ft.lists)) {
		if d.ids[ft.lists[id]] != id {
			gone = append(gone, nftables.SetElement{Key: be32(id)})
			delete(ft.lists, id)
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
