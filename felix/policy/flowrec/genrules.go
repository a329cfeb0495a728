package flowrec

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// GenTable is the nftables table ("inet routed-flows") of the poll
// source's generation rules (pollsrc.go).
const GenTable = "routed-flows"

// The poll source's use of the conntrack mark: the upper 16 bits are
// routed's, the lower 16 are left as they are.
//
//	bits 16-23  generation (1-255) of the entry's last event: its start,
//	            or its first TCP FIN or RST
//	bit  24     open: the entry started and has not ended
//	bit  25     ended: a FIN or RST was seen (set once)
const (
	markKeep     = 0x0000ffff
	markGenShift = 16
	markGenMask  = 0xff << markGenShift
	markOpen     = 1 << 24
	markEnded    = 1 << 25

	gens = 255
)

// genChain is the chain readGenRules reads (input holds the same).
const genChain = "postrouting"

// newCounters count the entries that got a generation, by the
// generation's parity: read and reset as the generation is read, the
// count of entries it should find (pollSource.unread).
var newCounters = [2]string{"new-even", "new-odd"}

// takeNewCount reads and resets the counter of poll n's parity.
func takeNewCount(c *nftables.Conn, n uint64) (uint64, error) {
	o, err := c.ResetObject(&nftables.CounterObj{Table: &nftables.Table{Name: GenTable, Family: nftables.TableFamilyINet}, Name: newCounters[n%2]})
	if err != nil {
		return 0, fmt.Errorf("flowrec: reading counter %s: %w", newCounters[n%2], err)
	}
	co, ok := o.(*nftables.CounterObj)
	if !ok {
		return 0, fmt.Errorf("flowrec: counter %s: not a counter (%T)", newCounters[n%2], o)
	}
	return co.Packets, nil
}

// gen is the generation of poll number n.
func gen(n uint64) uint32 { return uint32(n%gens) + 1 }

// genRules writes the generation rules of poll n in the namespace:
// the table and its chains (prerouting and output, after conntrack)
// are made if missing and their rules replaced, in one transaction.
//
//   - a new entry gets the generation and the open bit;
//   - a TCP packet with FIN or RST of an entry not ended gives it the
//     generation and the ended bit (clearing the open bit).
func genRules(c *nftables.Conn, n uint64) error {
	tbl := c.AddTable(&nftables.Table{Name: GenTable, Family: nftables.TableFamilyINet})
	for _, name := range newCounters {
		c.AddObj(&nftables.CounterObj{Table: tbl, Name: name})
	}
	accept := nftables.ChainPolicyAccept
	// Where every packet the node delivers or sends passes, after the
	// policy (filter, 0) and NAT (100), before conntrack confirms a new
	// entry (last): a connection the policy dropped gets no generation
	// and is not counted.
	prio := nftables.ChainPriorityRef(300)
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
	}{{genChain, nftables.ChainHookPostrouting}, {"input", nftables.ChainHookInput}} {
		ch := c.AddChain(&nftables.Chain{Name: h.name, Table: tbl, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: prio, Policy: &accept})
		c.FlushChain(ch)
		// The first packet only (a retransmitted SYN keeps the
		// generation it got), counted in the generation's counter.
		start := append(ctStateNew(), markBitsZero(markOpen|markEnded)...)
		start = append(start, &expr.Objref{Type: 1, Name: newCounters[n%2]}) // NFT_OBJECT_COUNTER
		start = append(start, setMark(markOpen|gen(n)<<markGenShift)...)
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: start})
		end := append(tcpFinOrRst(), markBitsZero(markEnded)...)
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: append(end, setMark(markEnded|gen(n)<<markGenShift)...)})
	}
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("flowrec: writing the generation rules (table inet %s): %w (the kernel lacks an nftables expression they use: nft_ct and nft_objref, the named counter's, must be loadable)", GenTable, err)
		}
		return fmt.Errorf("flowrec: writing the generation rules (table inet %s): %w", GenTable, err)
	}
	return nil
}

// readGenRules reads the generation the rules in the table write now
// (a previous routed's): ok is false without them.
func readGenRules(c *nftables.Conn) (g uint32, ok bool) {
	tbl := &nftables.Table{Name: GenTable, Family: nftables.TableFamilyINet}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: genChain, Table: tbl})
	if err != nil || len(rules) != 2 {
		return 0, false
	}
	xor := func(r *nftables.Rule) (uint32, bool) {
		var v uint32
		var found bool
		for _, e := range r.Exprs {
			if b, isB := e.(*expr.Bitwise); isB && len(b.Xor) == 4 {
				v, found = binaryutil.NativeEndian.Uint32(b.Xor), true
			}
		}
		return v, found
	}
	v, found := xor(rules[0])
	g = (v & markGenMask) >> markGenShift
	if !found || v&markOpen == 0 || g == 0 {
		return 0, false
	}
	return g, true
}

// deleteGenRules removes the table (nothing when it is missing).
func deleteGenRules(c *nftables.Conn) error {
	c.DelTable(&nftables.Table{Name: GenTable, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("flowrec: deleting table inet %s: %w", GenTable, err)
	}
	return nil
}

func ctStateNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func tcpFinOrRst() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		// The flags byte: FIN 0x01, RST 0x04.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x05}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0}},
	}
}

// markBitsZero matches entries whose mark has none of bits.
func markBitsZero(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	}
}

// setMark sets routed's bits of the entry's mark to v, keeping the rest.
func setMark(v uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(markKeep), Xor: binaryutil.NativeEndian.PutUint32(v)},
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
	}
}
