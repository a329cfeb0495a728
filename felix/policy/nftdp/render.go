package nftdp

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nftprefix"
)

// Registers: reg 1 is a 16-byte register; concatenations start at the
// first 32-bit register (NFT_REG32_00 = 8).
const (
	reg1     = 1
	reg32_00 = 8
)

// anonAdder creates an anonymous constant set in the transaction a rule
// is being added in.
type anonAdder func(s *nftables.Set, els []nftables.SetElement) error

// renderer turns family-neutral rules into one family's expressions.
type renderer struct {
	fam        *family
	table      *nftables.Table
	passMark   uint32
	acceptMark uint32 // host endpoints' (hostep.go)
}

// render returns the rule's expressions for r's family, or ok false when
// the rule cannot match in this family and is left out of it.
func (rd *renderer) render(r *Rule, anon anonAdder) (ex []expr.Any, ok bool, err error) {
	f := rd.fam
	if !f.applies(r) {
		return nil, false, nil
	}
	proto := r.protocol(f)
	for _, m := range []struct {
		key    expr.MetaKey
		prefix string
	}{{expr.MetaKeyIIFNAME, r.InIface}, {expr.MetaKeyOIFNAME, r.OutIface}} {
		if m.prefix != "" {
			ex = append(ex, &expr.Meta{Key: m.key, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte(m.prefix)})
		}
	}
	ex = append(ex, rd.hostExprs(r)...)
	if r.SrcNoRouteBack {
		// The route to the source, looked up as if to send there and
		// kept only when it leaves by the input interface: oif 0 when
		// there is none (or it is another device's, or local).
		ex = append(ex, &expr.Fib{Register: reg1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ne32(0)})
	}
	if r.SrcViaIface != "" {
		ex = append(ex, &expr.Fib{Register: reg1, FlagSADDR: true, ResultOIFNAME: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte(r.SrcViaIface)})
	}
	if r.DstNotUnicast {
		ex = append(ex, &expr.Fib{Register: reg1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(unix.RTN_UNICAST)})
	}
	if r.CtState != 0 {
		ex = append(ex, &expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(r.CtState), Xor: ne32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)})
	}
	if r.IfPassClear || r.IfPassSet {
		ex = append(ex, rd.markBit(r.IfPassSet)...)
	}
	if proto != 0 {
		ex = append(ex, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}})
	}
	if r.NotProto != 0 {
		ex = append(ex, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{r.NotProto}})
	}
	if m := r.ICMP; m != nil {
		ex = append(ex, thLoad(0, 1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{m.Type}})
		if m.Code >= 0 {
			ex = append(ex, thLoad(1, 1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(m.Code)}})
		}
	}
	if m := r.NotICMP; m != nil {
		if m.Code >= 0 {
			ex = append(ex, thLoad(0, 2), &expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{m.Type, byte(m.Code)}})
		} else {
			ex = append(ex, thLoad(0, 1), &expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{m.Type}})
		}
	}
	for _, s := range []struct {
		side    *Side
		addrOff uint32
		portOff uint32
	}{{&r.Src, f.srcOff, 0}, {&r.Dst, f.dstOff, 2}} {
		sx, err := rd.side(s.side, s.addrOff, s.portOff, anon)
		if err != nil {
			return nil, false, err
		}
		ex = append(ex, sx...)
	}
	if r.Counter {
		ex = append(ex, &expr.Counter{})
	}
	return append(ex, rd.action(r)...), true, nil
}

func (rd *renderer) side(s *Side, addrOff, portOff uint32, anon anonAdder) ([]expr.Any, error) {
	f := rd.fam
	var ex []expr.Any
	load := &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: f.addrLen}
	for i, nets := range [][]netip.Prefix{f.prefixes(s.Nets), f.prefixes(s.NotNets)} {
		if len(nets) == 0 {
			continue
		}
		x, err := rd.netMatch(load, nets, i == 1, anon)
		if err != nil {
			return nil, err
		}
		ex = append(ex, x...)
	}
	for _, name := range s.Sets {
		ex = append(ex, load, &expr.Lookup{SourceRegister: reg1, SetName: name})
	}
	for _, name := range s.NotSets {
		ex = append(ex, load, &expr.Lookup{SourceRegister: reg1, SetName: name, Invert: true})
	}
	for i, ps := range [][]PortRange{s.Ports, s.NotPorts} {
		if len(ps) == 0 {
			continue
		}
		x, err := rd.portMatch(portOff, ps, i == 1, anon)
		if err != nil {
			return nil, err
		}
		ex = append(ex, x...)
	}
	if s.NamedPortSet != "" {
		ex = append(ex, rd.namedPort(addrOff, portOff, s.NamedPortSet, false)...)
	}
	for _, name := range s.NotNamedPortSets {
		ex = append(ex, rd.namedPort(addrOff, portOff, name, true)...)
	}
	return ex, nil
}

// applies reports whether r can match in f: the IP version, ICMP
// against ICMPv6 (as Calico, ICMP rules are IPv4's and ICMPv6 rules
// IPv6's), and positive nets of f's family.
func (f *family) applies(r *Rule) bool {
	if r.IPVersion != 0 && r.IPVersion != f.version {
		return false
	}
	if p := r.protocol(f); (p == 1 && f.version == 6) || (p == 58 && f.version == 4) {
		return false
	}
	for _, nets := range [][]netip.Prefix{r.Src.Nets, r.Dst.Nets} {
		if len(nets) > 0 && len(f.prefixes(nets)) == 0 {
			return false // only other-family nets: never matches here
		}
	}
	return true
}

// protocol is the rule's protocol, ICMP's of f when only ICMP fields are
// given.
func (r *Rule) protocol(f *family) uint8 {
	if r.Proto == 0 && (r.ICMP != nil || r.NotICMP != nil) {
		return f.icmpProto
	}
	return r.Proto
}

func (rd *renderer) netMatch(load *expr.Payload, nets []netip.Prefix, invert bool, anon anonAdder) ([]expr.Any, error) {
	if len(nets) == 1 {
		p := nets[0]
		op := expr.CmpOpEq
		if invert {
			op = expr.CmpOpNeq
		}
		mask := make([]byte, rd.fam.addrLen)
		for i := 0; i < p.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		return []expr.Any{load,
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: rd.fam.addrLen, Mask: mask, Xor: make([]byte, rd.fam.addrLen)},
			&expr.Cmp{Op: op, Register: reg1, Data: p.Masked().Addr().AsSlice()}}, nil
	}
	s := &nftables.Set{Table: rd.table, Anonymous: true, Constant: true, Interval: true, KeyType: rd.fam.addrType}
	var els []nftables.SetElement
	for _, p := range nets {
		els = append(els, nftprefix.Elements(p)...)
	}
	if err := anon(s, els); err != nil {
		return nil, err
	}
	return []expr.Any{load, &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID, Invert: invert}}, nil
}

func (rd *renderer) portMatch(off uint32, ps []PortRange, invert bool, anon anonAdder) ([]expr.Any, error) {
	op := expr.CmpOpEq
	if invert {
		op = expr.CmpOpNeq
	}
	if len(ps) == 1 {
		p := ps[0]
		if p.First == p.Last {
			return []expr.Any{thLoad(off, 2), &expr.Cmp{Op: op, Register: reg1, Data: be16(p.First)}}, nil
		}
		return []expr.Any{thLoad(off, 2), &expr.Range{Op: op, Register: reg1, FromData: be16(p.First), ToData: be16(p.Last)}}, nil
	}
	s := &nftables.Set{Table: rd.table, Anonymous: true, Constant: true, Interval: true, KeyType: nftables.TypeInetService}
	var els []nftables.SetElement
	for _, p := range mergePorts(ps) {
		els = append(els, portElems(p)...)
	}
	if err := anon(s, els); err != nil {
		return nil, err
	}
	return []expr.Any{thLoad(off, 2), &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID, Invert: invert}}, nil
}

// namedPort matches address . l4proto . port against a named-port set.
func (rd *renderer) namedPort(addrOff, portOff uint32, set string, invert bool) []expr.Any {
	n := rd.fam.addrLen / 4
	return []expr.Any{
		&expr.Payload{DestRegister: reg32_00, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: rd.fam.addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg32_00 + n},
		&expr.Payload{DestRegister: reg32_00 + n + 1, Base: expr.PayloadBaseTransportHeader, Offset: portOff, Len: 2},
		&expr.Lookup{SourceRegister: reg32_00, SetName: set, Invert: invert},
	}
}

func thLoad(off, n uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: n}
}

// markBit loads meta mark & passMark and compares it with the bit (set)
// or with zero (clear).
func (rd *renderer) markBit(set bool) []expr.Any { return rd.testBits(rd.passMark, set) }

// testBits loads meta mark & bits and compares it with zero: not equal
// (set) or equal (clear).
func (rd *renderer) testBits(bits uint32, set bool) []expr.Any {
	op := expr.CmpOpEq
	if set {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(bits), Xor: ne32(0)},
		&expr.Cmp{Op: op, Register: reg1, Data: ne32(0)},
	}
}

// setMark rewrites the pass bit.
func (rd *renderer) setMark(on bool) []expr.Any { return rd.setBits(rd.passMark, on) }

// setBits rewrites bits: meta mark = (mark & ^bits) ^ (bits or 0).
func (rd *renderer) setBits(bits uint32, on bool) []expr.Any {
	var xor uint32
	if on {
		xor = bits
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(^bits), Xor: ne32(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}
}

// ne32 is a 32-bit value in host order, as meta mark sits in a register.
func ne32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func (rd *renderer) action(r *Rule) []expr.Any {
	if r.tailed() {
		// The verdict and its limited log are in the tail (tail.go).
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: r.tailName()}}
	}
	if ex, ok := rd.hostAction(r); ok {
		return ex
	}
	switch r.Action {
	case ActAccept:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	case ActDrop:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	case ActPass:
		return append(rd.setMark(true), &expr.Verdict{Kind: expr.VerdictReturn})
	case ActClearPass:
		return rd.setMark(false)
	case ActReturn:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	case ActJump:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: r.Target}}
	case ActDispatch:
		key := expr.MetaKeyOIFNAME
		if r.InIface != "" {
			key = expr.MetaKeyIIFNAME
		}
		// Interface -> goto its chain (a miss ends the rule: the next
		// rule drops).
		return []expr.Any{&expr.Meta{Key: key, Register: reg1},
			&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: r.Target}}
	case ActLog:
		var ex []expr.Any
		if r.LogRate > 0 {
			ex = append(ex, &expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(r.LogRate), Unit: expr.LimitTimeSecond, Burst: r.LogRate})
		}
		return append(ex, &expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: r.LogGroup, Data: []byte(r.LogPrefix)})
	}
	return nil
}

// comment is what a rule carries in its user data: its ID and content key.
func comment(key string) []byte { return userdata.AppendString(nil, userdata.TypeComment, key) }

// mergePorts sorts ranges and merges those that overlap or touch.
func mergePorts(ps []PortRange) []PortRange {
	out := append([]PortRange(nil), ps...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].First < out[j-1].First; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	merged := out[:0]
	for _, p := range out {
		if n := len(merged); n > 0 && uint32(p.First) <= uint32(merged[n-1].Last)+1 {
			if p.Last > merged[n-1].Last {
				merged[n-1].Last = p.Last
			}
			continue
		}
		merged = append(merged, p)
	}
	return merged
}
