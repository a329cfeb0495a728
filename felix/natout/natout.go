// Package natout programs NAT outgoing for pools with natOutgoing: traffic
// from such a pool to anywhere outside all pools is masqueraded.
//
// It owns one nftables table, "routed" (family ip), and nothing else:
//
//	table ip routed {
//		set all-pools { type ipv4_addr; flags interval; elements = { every pool } }
//		set nat-pools { type ipv4_addr; flags interval; elements = { natOutgoing pools } }
//		chain postrouting {
//			type nat hook postrouting priority srcnat;
//			ip saddr @nat-pools ip daddr != @all-pools masquerade
//		}
//	}
//
// Every change is one nftables transaction, so the rule never sees a
// half-updated set. Uninstall removes the table.
package natout

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Names of the objects this package owns.
const (
	TableName    = "routed"
	AllPoolsSet  = "all-pools"
	NATPoolsSet  = "nat-pools"
	ChainName    = "postrouting"
	tableFamily  = nftables.TableFamilyIPv4
	ipv4SrcOff   = 12
	ipv4DstOff   = 16
	ipv4AddrSize = 4
)

// Table keeps the routed NAT table in line with the pools. It is used
// from one goroutine.
type Table struct {
	conn     *nftables.Conn
	all, nat []netip.Prefix
	// installed is what the last successful write put in the kernel;
	// nil before the first.
	installed *state
}

type state struct{ all, nat []netip.Prefix }

// New returns a Table working in the network namespace open as netnsFd
// (-1 for the caller's own namespace).
func New(netnsFd int) (*Table, error) {
	c, err := newConn(netnsFd)
	if err != nil {
		return nil, err
	}
	return &Table{conn: c}, nil
}

// ErrUnsupported means the kernel has no nf_tables netlink interface.
var ErrUnsupported = errors.New("natout: kernel has no nftables support")

func newConn(netnsFd int) (*nftables.Conn, error) {
	// Probe first: the nftables library crashes instead of returning an
	// error when the kernel lacks nfnetlink.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	unix.Close(fd)
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("natout: opening nftables: %w", err)
	}
	return c, nil
}

// Close releases the netlink socket. The table stays in the kernel.
func (t *Table) Close() error { return t.conn.CloseLasting() }

// SetPools sets the CIDRs of all pools and of the natOutgoing ones.
func (t *Table) SetPools(all, nat []netip.Prefix) {
	t.all, t.nat = normalize(all), normalize(nat)
}

// Apply writes the sets if they changed since the last write. With
// verify, it first reads the table back from the kernel and rewrites
// all of it if anything differs (someone flushed or edited it).
func (t *Table) Apply(verify bool) error {
	want := &state{all: t.all, nat: t.nat}
	if verify && t.installed != nil {
		ok, err := t.matchesKernel(want)
		if err != nil || !ok {
			t.installed = nil
		}
	}
	switch {
	case t.installed == nil:
		if err := t.writeAll(want); err != nil {
			return err
		}
	case !slices.Equal(t.installed.all, want.all) || !slices.Equal(t.installed.nat, want.nat):
		if err := t.writeSets(want); err != nil {
			t.installed = nil
			return err
		}
	}
	t.installed = want
	return nil
}

func table() *nftables.Table { return &nftables.Table{Name: TableName, Family: tableFamily} }

func set(tbl *nftables.Table, name string) *nftables.Set {
	return &nftables.Set{Table: tbl, Name: name, KeyType: nftables.TypeIPAddr, Interval: true}
}

// writeAll (re)creates the table, both sets and the chain with its rule
// in one transaction; existing objects are reused and emptied.
func (t *Table) writeAll(want *state) error {
	tbl := t.conn.AddTable(table())
	all, nat := set(tbl, AllPoolsSet), set(tbl, NATPoolsSet)
	for _, s := range []*nftables.Set{all, nat} {
		if err := t.conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("natout: set %s: %w", s.Name, err)
		}
	}
	if err := t.fillSets(all, nat, want); err != nil {
		return err
	}
	ch := t.conn.AddChain(&nftables.Chain{
		Name: ChainName, Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	t.conn.FlushChain(ch)
	t.conn.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: ruleExprs(all, nat)})
	if err := t.conn.Flush(); err != nil {
		return fmt.Errorf("natout: installing table %s: %w", TableName, err)
	}
	return nil
}

// writeSets replaces both sets' contents in one transaction.
func (t *Table) writeSets(want *state) error {
	tbl := table()
	if err := t.fillSets(set(tbl, AllPoolsSet), set(tbl, NATPoolsSet), want); err != nil {
		return err
	}
	if err := t.conn.Flush(); err != nil {
		return fmt.Errorf("natout: updating pool sets: %w", err)
	}
	return nil
}

func (t *Table) fillSets(all, nat *nftables.Set, want *state) error {
	for _, x := range []struct {
		s *nftables.Set
		p []netip.Prefix
	}{{all, want.all}, {nat, want.nat}} {
		t.conn.FlushSet(x.s)
		if len(x.p) == 0 {
			continue
		}
		if err := t.conn.SetAddElements(x.s, elements(x.p)); err != nil {
			return fmt.Errorf("natout: set %s: %w", x.s.Name, err)
		}
	}
	return nil
}

// ruleExprs is: ip saddr @nat-pools ip daddr != @all-pools masquerade.
func ruleExprs(all, nat *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ipv4SrcOff, Len: ipv4AddrSize},
		&expr.Lookup{SourceRegister: 1, SetName: nat.Name, SetID: nat.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ipv4DstOff, Len: ipv4AddrSize},
		&expr.Lookup{SourceRegister: 1, SetName: all.Name, SetID: all.ID, Invert: true},
		&expr.Masq{},
	}
}

// elements encodes prefixes as interval set elements: the first address,
// and the address after the last flagged as an interval end (omitted
// when the range runs to 255.255.255.255).
func elements(ps []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range ps {
		start := p.Addr().As4()
		out = append(out, nftables.SetElement{Key: start[:]})
		if end, ok := afterLast(p); ok {
			e := end.As4()
			out = append(out, nftables.SetElement{Key: e[:], IntervalEnd: true})
		}
	}
	return out
}

func afterLast(p netip.Prefix) (netip.Addr, bool) {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	size := uint64(1) << (32 - p.Bits())
	next := uint64(v) + size
	if next > 0xffffffff {
		return netip.Addr{}, false
	}
	n := uint32(next)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// normalize sorts, masks and drops prefixes covered by another (pools
// never overlap once validated, but an interval set rejects overlaps).
func normalize(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	kept := out[:0]
	for _, p := range out {
		if len(kept) > 0 && kept[len(kept)-1].Overlaps(p) {
			continue // sorted: the earlier one is the same or wider
		}
		kept = append(kept, p)
	}
	return kept
}

// matchesKernel reads the table back and compares it with want.
func (t *Table) matchesKernel(want *state) (bool, error) {
	tbl := table()
	for _, x := range []struct {
		name string
		p    []netip.Prefix
	}{{AllPoolsSet, want.all}, {NATPoolsSet, want.nat}} {
		got, err := ReadSet(t.conn, x.name)
		if err != nil || !slices.Equal(got, x.p) {
			return false, err
		}
	}
	rules, err := t.conn.GetRules(tbl, &nftables.Chain{Name: ChainName, Table: tbl})
	if err != nil || len(rules) != 1 {
		return false, err
	}
	ex := rules[0].Exprs
	if len(ex) == 0 {
		return false, nil
	}
	_, masq := ex[len(ex)-1].(*expr.Masq)
	return masq, nil
}

// ReadSet reads one of the table's sets back as prefixes. Exported for
// tests and status tools.
func ReadSet(c *nftables.Conn, name string) ([]netip.Prefix, error) {
	s, err := c.GetSetByName(table(), name)
	if err != nil {
		return nil, fmt.Errorf("natout: reading set %s: %w", name, err)
	}
	els, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("natout: reading set %s: %w", name, err)
	}
	return rangesToPrefixes(els), nil
}

func rangesToPrefixes(els []nftables.SetElement) []netip.Prefix {
	var starts, ends []uint32
	for _, e := range els {
		if len(e.Key) != 4 {
			continue
		}
		v := uint32(e.Key[0])<<24 | uint32(e.Key[1])<<16 | uint32(e.Key[2])<<8 | uint32(e.Key[3])
		if e.IntervalEnd {
			ends = append(ends, v)
		} else {
			starts = append(starts, v)
		}
	}
	slices.Sort(starts)
	slices.Sort(ends)
	var out []netip.Prefix
	for _, s := range starts {
		// The range's end is the smallest end marker above its start.
		size := uint64(1) << 32
		if i, _ := slices.BinarySearch(ends, s+1); i < len(ends) && s != 0xffffffff {
			size = uint64(ends[i]) - uint64(s)
		} else {
			size -= uint64(s)
		}
		bits := 32
		for uint64(1)<<(32-bits) < size && bits > 0 {
			bits--
		}
		a := netip.AddrFrom4([4]byte{byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)})
		out = append(out, netip.PrefixFrom(a, bits))
	}
	return out
}

// Uninstall removes the routed table from the namespace open as netnsFd
// (-1 for the caller's own). A missing table is success.
func Uninstall(netnsFd int) error {
	c, err := newConn(netnsFd)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	c.DelTable(table())
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("natout: removing table %s: %w", TableName, err)
	}
	return nil
}
