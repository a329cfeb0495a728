package nftdp

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/internal/nftprefix"
)

// family is what differs between the ip and ip6 tables.
type family struct {
	name           string
	nft            nftables.TableFamily
	addrType       nftables.SetDatatype
	srcOff, dstOff uint32 // in the network header
	addrLen        uint32
	version        uint8
	icmpProto      uint8 // ICMP or ICMPv6
	namedPortType  nftables.SetDatatype
}

var (
	ipv4 = &family{name: "ip", nft: nftables.TableFamilyIPv4, addrType: nftables.TypeIPAddr,
		srcOff: 12, dstOff: 16, addrLen: 4, version: 4, icmpProto: 1,
		namedPortType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
	ipv6 = &family{name: "ip6", nft: nftables.TableFamilyIPv6, addrType: nftables.TypeIP6Addr,
		srcOff: 8, dstOff: 24, addrLen: 16, version: 6, icmpProto: 58,
		namedPortType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)}
)

func (f *family) has(p netip.Prefix) bool { return p.Addr().Is4() == (f.version == 4) }

// idx is the family's index in per-family counters (see famIdx).
func (f *family) idx() int {
	if f.version == 4 {
		return 0
	}
	return 1
}

// prefixes keeps f's prefixes, masked, sorted, without any that another
// covers: interval sets refuse overlapping elements.
func (f *family) prefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && f.has(p) {
			out = append(out, p.Masked())
		}
	}
	return nftprefix.DropCovered(out)
}

// portElems is an inclusive port range as interval elements.
func portElems(r PortRange) []nftables.SetElement {
	out := []nftables.SetElement{{Key: be16(r.First)}}
	if r.Last < 0xffff {
		out = append(out, nftables.SetElement{Key: be16(r.Last + 1), IntervalEnd: true})
	}
	return out
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// namedPortKey is address . protocol . port, each padded to 4 bytes as
// nftables lays out concatenations in registers.
func namedPortKey(m Member) []byte {
	k := m.Prefix.Addr().AsSlice()
	k = append(k, m.Proto, 0, 0, 0)
	return append(k, byte(m.Port>>8), byte(m.Port), 0, 0)
}

// memberFromNamedPortKey decodes namedPortKey.
func (f *family) memberFromNamedPortKey(k []byte) (Member, bool) {
	n := int(f.addrLen)
	if len(k) != n+8 {
		return Member{}, false
	}
	a, _ := netip.AddrFromSlice(k[:n])
	return Member{Prefix: netip.PrefixFrom(a, a.BitLen()), Proto: k[n], Port: binary.BigEndian.Uint16(k[n+4:])}, true
}

// InFamily reports whether the rule is rendered in the table of IP
// version v (4 or 6): its IPVersion, ICMP against ICMPv6, and nets of
// only the other family leave it out.
func (r *Rule) InFamily(v uint8) bool { return famOf(v).applies(r) }

// ProtocolIn is the protocol the rule matches in the table of IP
// version v: ICMP's of that family when only ICMP fields are given.
func (r *Rule) ProtocolIn(v uint8) uint8 { return r.protocol(famOf(v)) }

// NetsIn keeps the nets of IP version v, as the rule is rendered there.
func NetsIn(v uint8, nets []netip.Prefix) []netip.Prefix { return famOf(v).prefixes(nets) }

func famOf(v uint8) *family {
	if v == 6 {
		return ipv6
	}
	return ipv4
}
