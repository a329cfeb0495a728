package nftdp

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// epWant is where an endpoint's traffic goes: the chain for what it
// sends and the chain for what it receives, in the tables of fams.
type epWant struct {
	from, to string
	fams     Families
}

func (ft *famTable) ifaceMap(name string) *nftables.Set {
	return &nftables.Set{Table: ft.table, Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

func (ft *famTable) addDispatchMaps(t *txn) error {
	for _, m := range []string{FromWLIfaces, ToWLIfaces} {
		if _, ok := ft.ifaces[m]; !ok {
			if err := t.c.AddSet(ft.ifaceMap(m), nil); err != nil {
				return fmt.Errorf("nftdp: %s map %s: %w", ft.fam.name, m, err)
			}
			t.note("add map %s", m)
			ft.ifaces[m] = map[string]string{}
		}
	}
	return nil
}

// syncDispatch writes the dispatch map elements of the given interfaces:
// each endpoint dispatched in ft's family goes to its chains, any other
// interface has no element. Chains an element names exist by now, and
// chains deleted in the same transaction are deleted after this.
func (d *Dataplane) syncDispatch(t *txn, ft *famTable, ifaces []string) error {
	for _, m := range []string{FromWLIfaces, ToWLIfaces} {
		have := ft.ifaces[m]
		var add, del []nftables.SetElement
		for _, ifc := range ifaces {
			want := ""
			if w, ok := d.endpoints[ifc]; ok && w.fams.has(ft.fam.idx()) {
				want = w.from
				if m == ToWLIfaces {
					want = w.to
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
			if want != "" {
				add = append(add, nftables.SetElement{Key: ifnameKey(ifc), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: want}})
				have[ifc] = want
			}
		}
		if err := t.mapOps(ft.ifaceMap(m), del, add, ft.fam.name); err != nil {
			return err
		}
	}
	return nil
}

// dropLegacy deletes the maps an earlier version dispatched through
// (interface -> id -> chain, which Debian 12's nft cannot list), once the
// rules that used them have been replaced in this transaction.
func (ft *famTable) dropLegacy(t *txn) {
	for _, name := range ft.legacy {
		t.c.DelSet(&nftables.Set{Table: ft.table, Name: name})
		t.note("delete legacy map %s", name)
	}
	ft.legacy = nil
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
