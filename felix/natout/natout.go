// Package natout programs NAT outgoing for pools with natOutgoing: traffic
// from such a pool to anywhere outside all pools is masqueraded.
//
// It owns one nftables table per family, both named "routed", and nothing
// else:
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
// and, once an IPv6 pool exists, the same as "table ip6 routed" with
// ipv6_addr sets and "ip6 saddr ... ip6 daddr". Every change is one
// nftables transaction per family, so a rule never sees a half-updated
// set. Uninstall removes both tables.
package natout

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nftprefix"
)

// Names of the objects this package owns.
const (
	TableName   = "routed"
	AllPoolsSet = "all-pools"
	NATPoolsSet = "nat-pools"
	ChainName   = "postrouting"
)

// family is what differs between the ip and ip6 tables.
type family struct {
	name           string
	nft            nftables.TableFamily
	key            nftables.SetDatatype
	srcOff, dstOff uint32 // in the network header
	addrLen        uint32
	is4            bool
}

var (
	ipv4 = &family{name: "ip", nft: nftables.TableFamilyIPv4, key: nftables.TypeIPAddr, srcOff: 12, dstOff: 16, addrLen: 4, is4: true}
	ipv6 = &family{name: "ip6", nft: nftables.TableFamilyIPv6, key: nftables.TypeIP6Addr, srcOff: 8, dstOff: 24, addrLen: 16}
)

// Table keeps the routed NAT tables in line with the pools: "ip routed"
// always, "ip6 routed" once an IPv6 pool exists. It is used from one
// goroutine.
type Table struct {
	conn *nftables.Conn
	v4   famTable
	v6   famTable
}

// famTable is one family's table: the wanted pools and what the last
// successful write installed (nil before the first).
type famTable struct {
	fam       *family
	all, nat  []netip.Prefix
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
	return &Table{conn: c, v4: famTable{fam: ipv4}, v6: famTable{fam: ipv6}}, nil
}

// ErrUnsupported means the kernel has no nf_tables netlink interface.
var ErrUnsupported = errors.New("natout: kernel has no nftables support")

func newConn(netnsFd int) (*nftables.Conn, error) {
	// Probe first: the nftables library crashes instead of returning an
	// error when the kernel lacks nfnetlink.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
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

// SetPools sets the CIDRs of all pools and of the natOutgoing ones, of
// both families.
func (t *Table) SetPools(all, nat []netip.Prefix) {
	t.v4.all, t.v4.nat = normalize(all, true), normalize(nat, true)
	t.v6.all, t.v6.nat = normalize(all, false), normalize(nat, false)
}

// Apply writes the sets if they changed since the last write. With
// verify, it first reads the tables back from the kernel and rewrites
// all of one if anything differs (someone flushed or edited it). The
// ip6 table is left out until an IPv6 pool exists.
func (t *Table) Apply(verify bool) error {
	err := t.v4.apply(t.conn, verify)
	if len(t.v6.all) > 0 || t.v6.installed != nil {
		err = errors.Join(err, t.v6.apply(t.conn, verify))
	}
	return err
}

func (ft *famTable) apply(c *nftables.Conn, verify bool) error {
	want := &state{all: ft.all, nat: ft.nat}
	if verify && ft.installed != nil {
		ok, err := ft.fam.matchesKernel(c, want)
		if err != nil || !ok {
			ft.installed = nil
		}
	}
	switch {
	case ft.installed == nil:
		if err := ft.fam.writeAll(c, want); err != nil {
			return err
		}
	case !slices.Equal(ft.installed.all, want.all) || !slices.Equal(ft.installed.nat, want.nat):
		if err := ft.fam.writeSets(c, want); err != nil {
			ft.installed = nil
			return err
		}
	}
	ft.installed = want
	return nil
}

func (f *family) table() *nftables.Table { return &nftables.Table{Name: TableName, Family: f.nft} }

func (f *family) set(tbl *nftables.Table, name string) *nftables.Set {
	return &nftables.Set{Table: tbl, Name: name, KeyType: f.key, Interval: true}
}

// writeAll (re)creates the table, both sets and the chain with its rule
// in one transaction; existing objects are reused and emptied.
func (f *family) writeAll(c *nftables.Conn, want *state) error {
	tbl := c.AddTable(f.table())
	all, nat := f.set(tbl, AllPoolsSet), f.set(tbl, NATPoolsSet)
	for _, s := range []*nftables.Set{all, nat} {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("natout: %s set %s: %w", f.name, s.Name, err)
		}
	}
	if err := f.fillSets(c, all, nat, want); err != nil {
		return err
	}
	ch := c.AddChain(&nftables.Chain{
		Name: ChainName, Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	c.FlushChain(ch)
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: f.ruleExprs(all, nat)})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("natout: installing table %s %s: %w", f.name, TableName, err)
	}
	return nil
}

// writeSets replaces both sets' contents in one transaction.
func (f *family) writeSets(c *nftables.Conn, want *state) error {
	tbl := f.table()
	if err := f.fillSets(c, f.set(tbl, AllPoolsSet), f.set(tbl, NATPoolsSet), want); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("natout: updating %s pool sets: %w", f.name, err)
	}
	return nil
}

func (f *family) fillSets(c *nftables.Conn, all, nat *nftables.Set, want *state) error {
	for _, x := range []struct {
		s *nftables.Set
		p []netip.Prefix
	}{{all, want.all}, {nat, want.nat}} {
		c.FlushSet(x.s)
		if len(x.p) == 0 {
			continue
		}
		if err := c.SetAddElements(x.s, elements(x.p)); err != nil {
			return fmt.Errorf("natout: %s set %s: %w", f.name, x.s.Name, err)
		}
	}
	return nil
}

// ruleExprs is: ip saddr @nat-pools ip daddr != @all-pools masquerade
// (ip6 saddr/daddr in the ip6 table).
func (f *family) ruleExprs(all, nat *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.srcOff, Len: f.addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: nat.Name, SetID: nat.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff, Len: f.addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: all.Name, SetID: all.ID, Invert: true},
		&expr.Masq{},
	}
}

// elements encodes prefixes as interval set elements (nftprefix).
func elements(ps []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range ps {
		out = append(out, nftprefix.Elements(p)...)
	}
	return out
}

// normalize keeps one family's prefixes (IPv4 when v4), sorted and
// masked, and drops prefixes covered by another (pools never overlap
// once validated, but an interval set rejects overlaps).
func normalize(ps []netip.Prefix, v4 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && p.Addr().Is4() == v4 {
			out = append(out, p.Masked())
		}
	}
	return nftprefix.DropCovered(out)
}

// matchesKernel reads the table back and compares it with want.
func (f *family) matchesKernel(c *nftables.Conn, want *state) (bool, error) {
	tbl := f.table()
	for _, x := range []struct {
		name string
		p    []netip.Prefix
	}{{AllPoolsSet, want.all}, {NATPoolsSet, want.nat}} {
		got, err := f.readSet(c, x.name)
		if err != nil || !slices.Equal(got, x.p) {
			return false, err
		}
	}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: ChainName, Table: tbl})
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

// ReadSet reads one of the ip table's sets back as prefixes. Exported
// for tests and status tools.
func ReadSet(c *nftables.Conn, name string) ([]netip.Prefix, error) { return ipv4.readSet(c, name) }

// ReadSet6 is ReadSet for the ip6 table.
func ReadSet6(c *nftables.Conn, name string) ([]netip.Prefix, error) { return ipv6.readSet(c, name) }

func (f *family) readSet(c *nftables.Conn, name string) ([]netip.Prefix, error) {
	s, err := c.GetSetByName(f.table(), name)
	if err != nil {
		return nil, fmt.Errorf("natout: reading %s set %s: %w", f.name, name, err)
	}
	els, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("natout: reading %s set %s: %w", f.name, name, err)
	}
	// Sorted by address, as SetPools keeps the wanted prefixes.
	got := nftprefix.Prefixes(els, int(f.addrLen))
	slices.SortFunc(got, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return got, nil
}

// Uninstall removes the routed tables (ip and ip6) from the namespace
// open as netnsFd (-1 for the caller's own). A missing table is success.
func Uninstall(netnsFd int) error {
	c, err := newConn(netnsFd)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	var errs []error
	// One transaction each: a missing ip6 table must not keep the ip one.
	for _, f := range []*family{ipv4, ipv6} {
		c.DelTable(f.table())
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("natout: removing table %s %s: %w", f.name, TableName, err))
		}
	}
	return errors.Join(errs...)
}
