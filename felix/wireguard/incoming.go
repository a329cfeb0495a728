package wireguard

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// IncomingTable is the name of host encryption's two nftables tables,
// one of family inet and one of family arp: `nft list table inet
// routed-wireguard`, `nft list table arp routed-wireguard`.
const IncomingTable = "routed-wireguard"

// arpIn is the arp family's input hook (NF_ARP_IN in
// linux/netfilter_arp.h; not the inet family's NF_INET_LOCAL_IN, 1).
const arpIn nftables.ChainHook = 0

// IncomingMark keeps the IncomingTable tables, whose rules mark every
// packet that arrives on an interface other than lo, the WireGuard
// devices and the pods' with FirewallMark. With
// net.ipv4.conf.all.src_valid_mark=1 the reverse-path check then looks
// such a packet's source up past the host encryption rule, in the main
// table: under strict rp_filter a peer's WireGuard UDP, and the clear
// host traffic of a peer that does not encrypt it, arrive on the uplink
// while the peer's address routes through the device, and would be
// dropped (Calico marks them the same way). The inet table marks IP
// packets before conntrack (prerouting, raw priority).
//
// The arp table marks ARP: the kernel answers an ARP request only if
// a route lookup from the target to the sender passes the same check
// (arp_process calls ip_route_input, whose fib_validate_source looks
// the sender up with the skb's mark when src_valid_mark is set), and
// ARP never passes the inet family's hooks. Without it a node with a
// peer's address in table 82 ignores that peer's ARP requests under
// strict rp_filter, and once their neighbour entries expire the two
// cannot reach each other on the uplink at all, WireGuard included.
// NF_ARP_IN runs before arp_process, so the mark is there for the
// lookup. arp_filter=1 cannot be helped this way: arp_filter() looks
// the route back to the sender up with ip_route_output, whose flow has
// no mark (felix refuses IPv4 host encryption there instead). IPv6 needs nothing: neighbour discovery makes no
// reverse-path check and IPv6 has no rp_filter.
//
// Both tables are written and deleted in one transaction. A kernel
// without nftables' arp family (CONFIG_NF_TABLES_ARP unset) refuses
// that transaction whole, so before writing the tables Apply probes the
// family (ARPFamily): when the kernel refuses it, only the inet table
// is written and ARPUnmarked says why ARP is not marked (the caller
// must then refuse host encryption under strict rp_filter, where the
// peers' ARP would be ignored). Not safe for concurrent use: felix's
// loop owns it.
type IncomingMark struct {
	// NetNSFd is the namespace to program (-1: this process's).
	NetNSFd int
	// WorkloadPrefix is the pods' host interface prefix ("cali").
	WorkloadPrefix string
	// ARPFamily, when set, replaces the probe of nftables' arp family:
	// nil when the kernel takes an arp table with an input chain, else
	// why not. Tests set it to stand for a kernel without the family.
	ARPFamily    func(*nftables.Conn) error
	want, synced bool
	// arpErr is why the arp table is not written while the tables are
	// wanted (nil: it is, or nothing is wanted).
	arpErr error
}

// ARPUnmarked reports why incoming ARP is not marked while the tables
// are wanted and written (the kernel has no nftables arp family), or
// nil.
func (m *IncomingMark) ARPUnmarked() error {
	if !m.want || !m.synced {
		return nil
	}
	return m.arpErr
}

// Set records whether the table should exist; Apply makes it so.
func (m *IncomingMark) Set(on bool) {
	if on != m.want {
		m.want, m.synced = on, false
	}
}

// Apply writes both tables (replacing whatever is there, in one
// transaction) or deletes them, when the wanted state changed or on a
// full resync. A table already gone is success.
func (m *IncomingMark) Apply(full bool) error {
	if m.synced && !full {
		return nil
	}
	// Probe first: the nftables library crashes instead of returning an
	// error when the kernel lacks nfnetlink.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		if !m.want {
			m.synced = true // no nftables: no table to remove either
			return nil
		}
		return fmt.Errorf("wireguard: nftables table %s: kernel has no nftables: %w", IncomingTable, err)
	}
	unix.Close(fd)
	var opts []nftables.ConnOption
	if m.NetNSFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(m.NetNSFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("wireguard: nftables table %s: %w", IncomingTable, err)
	}
	families := []nftables.TableFamily{nftables.TableFamilyINet, nftables.TableFamilyARP}
	arpErr := error(nil)
	if m.want {
		probe := m.ARPFamily
		if probe == nil {
			probe = probeARP
		}
		if arpErr = probe(c); arpErr != nil {
			// Without the family the combined transaction would fail
			// whole: write the inet table alone.
			families = families[:1]
			arpErr = fmt.Errorf("the kernel refuses nftables' arp family (CONFIG_NF_TABLES_ARP): %w", arpErr)
		}
	}
	err = m.flush(c, families...)
	if err != nil && !m.want && present(c, nftables.TableFamilyINet) {
		// A kernel without nftables' arp family (CONFIG_NF_TABLES_ARP)
		// refuses the whole transaction: remove the inet table alone.
		err = m.flush(c, nftables.TableFamilyINet)
	}
	if err != nil && (m.want || present(c, nftables.TableFamilyINet, nftables.TableFamilyARP)) {
		return fmt.Errorf("wireguard: writing nftables tables inet and arp %s: %w", IncomingTable, err)
	}
	if !m.synced {
		lg := log.WithField("table", IncomingTable).WithField("present", m.want).WithField("arp", m.want && arpErr == nil)
		if arpErr != nil {
			lg = lg.WithError(arpErr) // the caller warns (ARPUnmarked)
		}
		lg.Info("host encryption's incoming mark tables written")
	}
	m.arpErr, m.synced = arpErr, true
	return nil
}

// probeARP asks the kernel for an arp table with a filter chain on
// its input hook and deletes it in the same transaction: nothing is
// left behind, and an error says the family cannot be used.
func probeARP(c *nftables.Conn) error {
	tbl := &nftables.Table{Name: IncomingTable + "-probe", Family: nftables.TableFamilyARP}
	c.AddTable(tbl)
	c.AddChain(&nftables.Chain{Name: "probe", Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookRef(arpIn), Priority: nftables.ChainPriorityFilter})
	c.DelTable(tbl)
	return c.Flush()
}

// flush replaces the IncomingTable table of each family with the
// wanted one (none when off), in one transaction: add, delete, add, so
// that it works whether or not a table was there.
func (m *IncomingMark) flush(c *nftables.Conn, families ...nftables.TableFamily) error {
	for _, fam := range families {
		tbl := &nftables.Table{Name: IncomingTable, Family: fam}
		c.AddTable(tbl)
		c.DelTable(tbl)
		if !m.want {
			continue
		}
		c.AddTable(tbl)
		ch := &nftables.Chain{Name: "mark-incoming", Table: tbl, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw}
		if fam == nftables.TableFamilyARP {
			ch.Hooknum, ch.Priority = nftables.ChainHookRef(arpIn), nftables.ChainPriorityFilter
		}
		c.AddChain(ch)
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: m.ruleExprs()})
	}
	return c.Flush()
}

// ruleExprs is: iifname != { lo, wg.routed, wg-v6.routed } iifname !=
// "<prefix>*" meta mark set mark | FirewallMark.
func (m *IncomingMark) ruleExprs() []expr.Any {
	ex := []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}}
	for _, name := range []string{"lo", DeviceV4, DeviceV6} {
		ex = append(ex, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(name)})
	}
	if m.WorkloadPrefix != "" {
		ex = append(ex, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(m.WorkloadPrefix)})
	}
	mask := binary.NativeEndian.AppendUint32(nil, ^uint32(FirewallMark))
	xor := binary.NativeEndian.AppendUint32(nil, FirewallMark)
	return append(ex,
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: xor},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	)
}

// ifname is an interface name as the kernel holds it: IFNAMSIZ bytes,
// NUL-padded, so a comparison matches the whole name.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// present reports whether an IncomingTable table of one of the
// families may exist: a kernel that cannot list a family's tables (no
// nf_tables) has none of it to remove.
func present(c *nftables.Conn, families ...nftables.TableFamily) bool {
	for _, fam := range families {
		tables, err := c.ListTablesOfFamily(fam)
		if err != nil {
			continue
		}
		for _, t := range tables {
			if t.Name == IncomingTable {
				return true
			}
		}
	}
	return false
}
