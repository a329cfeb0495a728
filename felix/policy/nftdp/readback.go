package nftdp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables/expr"

	"github.com/routed-net/routed/felix/internal/nftprefix"
)

// load reads ft's table back from the kernel: chains with their rules'
// keys, named sets with their elements, and the dispatch maps. A missing
// table reads as empty.
func (d *Dataplane) load(ft *famTable) error {
	ft.tableExists = false
	prev := ft.sets
	ft.chains = map[string]*chainHave{}
	ft.sets = map[string]*setHave{}
	ft.ifaces = map[string]map[string]string{}
	ft.legacy = nil
	tables, err := d.conn.ListTablesOfFamily(ft.fam.nft)
	if err != nil {
		return fmt.Errorf("nftdp: listing %s tables: %w", ft.fam.name, err)
	}
	for _, tb := range tables {
		ft.tableExists = ft.tableExists || tb.Name == ft.table.Name
	}
	if !ft.tableExists {
		ft.loaded = true
		return nil
	}
	chains, err := d.conn.ListChainsOfTableFamily(ft.fam.nft)
	if err != nil {
		return fmt.Errorf("nftdp: listing %s chains: %w", ft.fam.name, err)
	}
	for _, c := range chains {
		if c.Table.Name != ft.table.Name {
			continue
		}
		h := ""
		if c.Hooknum != nil && c.Priority != nil {
			h = (&hook{num: c.Hooknum, prio: c.Priority}).String()
		}
		ft.chains[c.Name] = &chainHave{hook: h}
	}
	// One dump of the whole table; rules come in order within a chain.
	rules, err := d.dump.rules(ft.fam.nft, ft.table.Name)
	if err != nil {
		return fmt.Errorf("nftdp: reading %s rules: %w", ft.fam.name, err)
	}
	for i := range rules {
		if c := ft.chains[rules[i].chain]; c != nil {
			c.keys = append(c.keys, rules[i].comment)
		}
	}
	sets, err := d.conn.GetSets(ft.table)
	if err != nil {
		return fmt.Errorf("nftdp: listing %s sets: %w", ft.fam.name, err)
	}
	for _, s := range sets {
		if s.Anonymous || strings.HasPrefix(s.Name, "__") {
			continue
		}
		// The sets of addresses and of named ports, the big ones (every
		// pod a selector matches), are read key by key into the map the
		// previous read made, emptied; the others through the library.
		if !s.IsMap && !s.Interval {
			h := &setHave{kind: AddrSet}
			decode := func(k []byte) {
				if a, ok := netip.AddrFromSlice(k); ok && len(k) == int(ft.fam.addrLen) {
					h.elems.put(Member{Prefix: netip.PrefixFrom(a, a.BitLen())}.key(), struct{}{})
				}
			}
			if s.KeyType.Bytes == ft.fam.namedPortType.Bytes {
				h.kind = NamedPortSet
				decode = func(k []byte) {
					if m, ok := ft.fam.memberFromNamedPortKey(k); ok {
						h.elems.put(m.key(), struct{}{})
					}
				}
			}
			begin := func() {
				h.elems = reuse(prev[s.Name])
			}
			if err := d.dump.setKeys(ft.fam.nft, ft.table.Name, s.Name, begin, decode); err != nil {
				return fmt.Errorf("nftdp: reading %s set %s: %w", ft.fam.name, s.Name, err)
			}
			ft.sets[s.Name] = h
			continue
		}
		els, err := d.conn.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("nftdp: reading %s set %s: %w", ft.fam.name, s.Name, err)
		}
		switch {
		case s.IsMap && (s.Name == FromWLIfaces || s.Name == ToWLIfaces):
			// Verdict maps under these names are all any version wrote
			// (the library reads a verdict map's data type back wrong,
			// so the names decide).
			m := map[string]string{}
			for _, e := range els {
				m[string(bytes.TrimRight(e.Key, "\x00"))] = verdictChain(e.Val)
			}
			ft.ifaces[s.Name] = m
		case s.IsMap:
			// Only this package writes the table: any other map is an
			// earlier version's dispatch.
			ft.legacy = append(ft.legacy, s.Name)
		default: // an interval set
			h := &setHave{kind: AddrSet, interval: true}
			for _, p := range nftprefix.Prefixes(els, int(ft.fam.addrLen)) {
				h.elems.put(Member{Prefix: p}.key(), struct{}{})
			}
			ft.sets[s.Name] = h
		}
	}
	ft.loaded = true
	return nil
}

// reuse empties the elements of a set read before, for a read of the
// same set to fill: the maps keep their room, so a resync does not
// allocate the sets' maps again. Empty when there was none.
func reuse(h *setHave) memberMap[struct{}] {
	if h == nil || h.interval {
		return memberMap[struct{}]{}
	}
	h.elems.clear()
	return h.elems
}

// Counter is a rule's packet and byte count, summed over both families
// and over the nftables rules one policy rule became.
type Counter struct{ Packets, Bytes uint64 }

// Counters reads the counters of every rule with an ID in the chains
// that match (all chains when match is nil), keyed by rule ID: one dump
// of each family's table.
func (d *Dataplane) Counters(match func(chain string) bool) (map[string]Counter, error) {
	out := map[string]Counter{}
	keep := func(chain string) bool {
		return d.chains[chain] != nil && (match == nil || match(chain))
	}
	for _, ft := range d.fams {
		if !ft.tableExists {
			continue
		}
		rules, err := d.dump.rules(ft.fam.nft, ft.table.Name)
		if err != nil {
			return nil, fmt.Errorf("nftdp: reading %s counters: %w", ft.fam.name, err)
		}
		addRuleCounters(out, rules, keep)
	}
	return out, nil
}

// verdictChain decodes a verdict map element's data, which the library
// hands back raw: netlink attributes NFTA_VERDICT_CODE (big-endian) and
// NFTA_VERDICT_CHAIN. Anything but a goto reads as "?", never a chain
// we want.
func verdictChain(b []byte) string {
	var code int32 = -1
	chain := ""
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff
		if l < 4 || l > len(b) {
			break
		}
		v := b[4:l]
		switch {
		case typ == 1 && len(v) == 4: // NFTA_VERDICT_CODE
			code = int32(binary.BigEndian.Uint32(v))
		case typ == 2: // NFTA_VERDICT_CHAIN
			chain = string(bytes.TrimRight(v, "\x00"))
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	if code != int32(expr.VerdictGoto) || chain == "" {
		return "?"
	}
	return chain
}
