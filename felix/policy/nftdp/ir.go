package nftdp

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
)

// Action is what a rule does when all its matches hold.
type Action uint8

// Rule actions. Accept and Drop end evaluation for the hook; Pass sets the
// pass mark bit and returns to the endpoint chain, which then skips the
// rest of the tier; Log sends the packet to nflog and goes on; Jump and
// Return are for the chains this package builds around the policies.
const (
	ActNone Action = iota // match only (with a counter): no verdict
	ActAccept
	ActDrop
	ActPass
	ActLog
	ActReturn
	ActJump
	ActClearPass // clears the pass bit, then goes on
	ActDispatch  // goto the chain the interface maps to in map Target
	// Host endpoints' (hostep.go): set the accept bit and accept (a
	// preDNAT Allow); the same without connection tracking (a
	// doNotTrack Allow); clear the accept bit and go on.
	ActMarkAccept
	ActNotrack
	ActClearAccept
	// Host endpoints found by address (hostep.go): goto Target (accept
	// when "") when the packet's destination is an address of the
	// interface it arrived on; the same for its source and the
	// interface it leaves by.
	ActGotoLocalDst
	ActGotoLocalSrc
	// The same when the address is the host's own on any interface
	// (an IPv4 address two interfaces hold is local on the first
	// only, for the kernel's per-interface check).
	ActGotoAnyLocalDst
	ActGotoAnyLocalSrc
)

var actionNames = [...]string{"none", "accept", "drop", "pass", "log", "return", "jump", "clear-pass", "dispatch", "mark-accept", "notrack", "clear-accept",
	"goto-local-dst", "goto-local-src", "goto-any-local-dst", "goto-any-local-src"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// PortRange is an inclusive range of ports; First == Last for one port.
type PortRange struct{ First, Last uint16 }

// ICMPMatch matches an ICMP (or ICMPv6) type and, when Code >= 0, code.
type ICMPMatch struct {
	Type uint8
	Code int // -1: any code
}

// Side is what a rule matches on one end of the packet (source or
// destination). Every non-empty field must hold.
type Side struct {
	// Nets: the address is in one of them. NotNets: in none of them.
	Nets, NotNets []netip.Prefix
	// Sets: the address is in every named address set. NotSets: in none.
	Sets, NotSets []string
	// Ports: the port is in one of the ranges. NotPorts: in none.
	Ports, NotPorts []PortRange
	// NamedPortSet: address . protocol . port is in that set.
	// NotNamedPortSets: in none of them.
	NamedPortSet     string
	NotNamedPortSets []string
}

// Rule is one nftables rule in the family-neutral form the calculator
// produces. The dataplane renders it for each family, leaving a rule out
// of a family it cannot match in (an IPv4-only net, ICMP in ip6).
type Rule struct {
	// ID names the rule for counters and logs (tier/policy/direction/index);
	// empty for the rules this package builds itself.
	ID string
	// IPVersion restricts the rule to 4 or 6; 0 for both.
	IPVersion uint8
	// Proto and NotProto are IP protocol numbers; 0 means unset.
	Proto, NotProto uint8
	ICMP, NotICMP   *ICMPMatch
	Src, Dst        Side
	// InIface and OutIface match interface names starting with them
	// (end one with "\x00" for the whole name).
	InIface, OutIface string
	// NotInIfaces and NotOutIfaces: the name starts with none of them.
	NotInIfaces, NotOutIfaces []string
	// IfAcceptMark: the rule applies only while the accept bit is set
	// (a doNotTrack or preDNAT policy allowed the packet).
	IfAcceptMark bool
	// CtState matches when the conntrack state has any of these bits
	// (expr.CtStateBit*); 0 for no conntrack match.
	CtState uint32
	// SrcNoRouteBack: the packet's source address has no route back
	// through the interface it came in on (nft: fib saddr . iif oif
	// missing), a reverse-path check independent of rp_filter. Only
	// meaningful on the prerouting, input and forward hooks.
	SrcNoRouteBack bool
	// SrcViaIface: the route to the packet's source leaves by an
	// interface whose name starts with this (nft: fib saddr oifname
	// "cali*"): the source is a local pod's address.
	SrcViaIface string
	// DstNotUnicast: the destination's route is not a unicast one (nft:
	// fib daddr type != unicast): the packet is for the node itself
	// (local, broadcast, multicast), not to be forwarded.
	DstNotUnicast bool
	// IfPassClear: the rule applies only while the pass bit is clear.
	IfPassClear bool
	// IfPassSet: the rule applies only while the pass bit is set.
	IfPassSet bool
	Action    Action
	// Target is the chain of ActJump, the map of ActDispatch (matched on
	// the input interface when InIface is set, else the output one).
	Target string
	// Goto makes ActJump a goto: the target's end is the caller's.
	Goto bool
	// LogPrefix is the nflog prefix of ActLog, or of a verdict rule
	// that also logs.
	LogPrefix string
	// LogGroup is the nflog group of ActLog. Set on an ActAccept,
	// ActDrop, ActPass, ActReturn, ActMarkAccept or ActNotrack rule, the
	// rule also logs what it decides: it is written as a goto to a tail
	// chain that logs, limited, and then gives the verdict (tail.go).
	LogGroup uint16
	// LogRate limits the log to that many packets a second (0:
	// unlimited).
	LogRate uint32
	// Counter adds a packets/bytes counter.
	Counter bool
}

// key identifies a rule's content: the same key means the same rendered
// rule in either family. It is stored in the rule's comment so a resync
// can compare the kernel's rules without decoding expressions. Only the
// fields a rule sets go into it (fieldsOf), so a field added to Rule or
// Side in a later release leaves the keys of rules that do not use it,
// and with them the rules and their counters, as they were: the first
// apply after an upgrade rewrites only what changed.
func (r *Rule) key() string {
	var b strings.Builder
	fieldsOf(&b, reflect.ValueOf(*r))
	h := sha256.Sum256([]byte(b.String()))
	k := base64.RawURLEncoding.EncodeToString(h[:12])
	if r.ID == "" {
		return k
	}
	id := r.ID
	if len(id) > maxIDLen {
		// Rule user data stops at 256 bytes: keep the ID's start and a
		// hash of the whole, so IDs stay distinct.
		ih := sha256.Sum256([]byte(id))
		id = id[:maxIDLen-17] + "~" + base64.RawURLEncoding.EncodeToString(ih[:12])
	}
	return id + " " + k
}

// maxIDLen bounds the ID part of a rule's comment.
const maxIDLen = 200

// fieldsOf writes a struct's non-zero fields as name:value, in
// declaration order, recursing into this package's struct fields (Side)
// and through pointers (ICMP, NotICMP); any other value is written with
// %+v.
func fieldsOf(b *strings.Builder, v reflect.Value) {
	t := v.Type()
	b.WriteByte('{')
	for i := range t.NumField() {
		f := v.Field(i)
		if f.IsZero() {
			continue
		}
		b.WriteString(t.Field(i).Name)
		b.WriteByte(':')
		if f.Kind() == reflect.Pointer {
			f = f.Elem()
		}
		if f.Kind() == reflect.Struct && f.Type().PkgPath() == t.PkgPath() {
			fieldsOf(b, f)
		} else {
			fmt.Fprintf(b, "%+v", f.Interface())
		}
		b.WriteByte(' ')
	}
	b.WriteByte('}')
}

// ruleID is the ID part of a stored comment.
func ruleID(comment string) string {
	if i := strings.LastIndexByte(comment, ' '); i >= 0 {
		return comment[:i]
	}
	return ""
}

// SetKind is the type of an nftables set this package manages.
type SetKind uint8

// Set kinds: addresses and networks of one family (an interval set), or
// address . protocol . port for named ports.
const (
	AddrSet SetKind = iota + 1
	NamedPortSet
)

// Member is one element of a set: a prefix (addresses are /32 or /128),
// and for NamedPortSet also the protocol and port.
type Member struct {
	Prefix netip.Prefix
	Proto  uint8
	Port   uint16
}

// mkey is a Member as the map key the desired and programmed states
// keep: 22 bytes and no pointer, where a Member is 40 with one (the
// zone of its netip.Addr). A set can hold a cluster's worth of pods (a
// named port every pod has), so this halves what each member costs and
// the collector has nothing to scan in those maps. Those maps
// (memberMap) pack an IPv4 member further, into 8 bytes.
type mkey struct {
	addr  [16]byte
	fam   uint8 // 4 or 6; 0 for the zero Prefix
	bits  uint8
	proto uint8
	port  uint16
}

func (m Member) key() mkey {
	k := mkey{proto: m.Proto, port: m.Port}
	if a := m.Prefix.Addr(); a.IsValid() {
		k.addr, k.bits, k.fam = a.As16(), uint8(m.Prefix.Bits()), 6
		if a.Is4() {
			k.fam = 4
		}
	}
	return k
}

func (k mkey) member() Member {
	m := Member{Proto: k.proto, Port: k.port}
	switch k.fam {
	case 4:
		m.Prefix = netip.PrefixFrom(netip.AddrFrom16(k.addr).Unmap(), int(k.bits))
	case 6:
		m.Prefix = netip.PrefixFrom(netip.AddrFrom16(k.addr), int(k.bits))
	}
	return m
}

// in reports whether the member is of f's family (family.has).
func (k mkey) in(f *family) bool { return (k.fam == 4) == (f.version == 4) }

func membersOf(ks []mkey) []Member {
	out := make([]Member, len(ks))
	for i, k := range ks {
		out[i] = k.member()
	}
	return out
}

func (m Member) String() string {
	if m.Port != 0 {
		return fmt.Sprintf("%s . %d . %d", m.Prefix.Addr(), m.Proto, m.Port)
	}
	return m.Prefix.String()
}
