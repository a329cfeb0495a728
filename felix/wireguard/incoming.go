package wireguard

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// IncomingTable is the nftables table (family inet) of host encryption:
// `nft list table inet routed-wireguard`.
const IncomingTable = "routed-wireguard"

// IncomingMark keeps IncomingTable, whose one rule marks every packet
// that arrives on an interface other than lo, the WireGuard devices and
// the pods' with FirewallMark, before conntrack (raw priority). With
// net.ipv4.conf.all.src_valid_mark=1 the reverse-path check then looks
// such a packet's source up past the host encryption rule, in the main
// table: under strict rp_filter a peer's WireGuard UDP, and the clear
// host traffic of a peer that does not encrypt it, arrive on the uplink
// while the peer's address routes through the device, and would be
// dropped (Calico marks them the same way). Not safe for concurrent
// use: felix's loop owns it.
type IncomingMark struct {
	// NetNSFd is the namespace to program (-1: this process's).
	NetNSFd int
	// WorkloadPrefix is the pods' host interface prefix ("cali").
	WorkloadPrefix string
	want, synced   bool
}

// Set records whether the table should exist; Apply makes it so.
func (m *IncomingMark) Set(on bool) {
	if on != m.want {
		m.want, m.synced = on, false
	}
}

// Apply writes the table (replacing whatever is there, in one
// transaction) or deletes it, when the wanted state changed or on a
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
	tbl := &nftables.Table{Name: IncomingTable, Family: nftables.TableFamilyINet}
	// Add, delete, add: one transaction that replaces the table whether
	// or not it was there.
	c.AddTable(tbl)
	c.DelTable(tbl)
	if m.want {
		c.AddTable(tbl)
		ch := c.AddChain(&nftables.Chain{Name: "mark-incoming", Table: tbl, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: m.ruleExprs()})
	}
	if err := c.Flush(); err != nil && (m.want || present(c)) {
		return fmt.Errorf("wireguard: writing nftables table %s: %w", IncomingTable, err)
	}
	if !m.synced {
		log.WithField("table", IncomingTable).WithField("present", m.want).Info("host encryption's incoming mark table written")
	}
	m.synced = true
	return nil
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

// present reports whether IncomingTable may exist: a kernel that cannot
// list inet tables (no nf_tables) has none to remove.
func present(c *nftables.Conn) bool {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false
	}
	for _, t := range tables {
		if t.Name == IncomingTable {
			return true
		}
	}
	return false
}
