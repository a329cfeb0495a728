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
//	bits 16-22  start generation (1-127) of an entry not closing
//	bit  23     open: set with the start generation, cleared at the end
//	bits 24-31  end generation (1-255): the generation of the entry's
//	            first TCP FIN or RST, set once
const (
	markKeep       = 0x0000ffff
	markStartShift = 16
	markStartMask  = 0x7f << markStartShift
	markOpen       = 1 << 23
	markEndShift   = 24
	markEndMask    = 0xff << markEndShift

	startGens = 127
	endGens   = 255
)

// startGen and endGen are the generations of poll number n.
func startGen(n uint64) uint32 { return uint32(n%startGens) + 1 }
func endGen(n uint64) uint32   { return uint32(n%endGens) + 1 }

// genRules writes the generation rules of poll n in the namespace:
// the table and its chains (prerouting and output, after conntrack)
// are made if missing and their rules replaced, in one transaction.
//
//   - a new entry gets the start generation and the open bit;
//   - a TCP packet with FIN or RST of an entry without an end
//     generation gives it the end generation, and clears its start
//     generation and open bit.
func genRules(c *nftables.Conn, n uint64) error {
	tbl := c.AddTable(&nftables.Table{Name: GenTable, Family: nftables.TableFamilyINet})
	accept := nftables.ChainPolicyAccept
	// After conntrack (-200), so that its state is this packet's.
	prio := nftables.ChainPriorityRef(-150)
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
	}{{"prerouting", nftables.ChainHookPrerouting}, {"output", nftables.ChainHookOutput}} {
		ch := c.AddChain(&nftables.Chain{Name: h.name, Table: tbl, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: prio, Policy: &accept})
		c.FlushChain(ch)
		start := append(ctStateNew(), setMark(markOpen|startGen(n)<<markStartShift)...)
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: start})
		end := append(tcpFinOrRst(), markBitsZero(markEndMask)...)
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: append(end, setMark(endGen(n)<<markEndShift)...)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("flowrec: writing the generation rules (table inet %s): %w", GenTable, err)
	}
	return nil
}

// readGenRules reads the generations the rules in the table hold now
// (a previous routed's): ok is false without them.
func readGenRules(c *nftables.Conn) (start, end uint32, ok bool) {
	tbl := &nftables.Table{Name: GenTable, Family: nftables.TableFamilyINet}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: "prerouting", Table: tbl})
	if err != nil || len(rules) != 2 {
		return 0, 0, false
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
	sv, ok1 := xor(rules[0])
	ev, ok2 := xor(rules[1])
	start, end = (sv&markStartMask)>>markStartShift, (ev&markEndMask)>>markEndShift
	if !ok1 || !ok2 || sv&markOpen == 0 || start == 0 || end == 0 {
		return 0, 0, false
	}
	return start, end, true
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
