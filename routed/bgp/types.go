package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	"github.com/routed-net/routed/pkg/ipam"
)

// Peer types, shown in the PEER TYPE column of routedctl node status.
const (
	PeerTypeMesh           = "node-to-node mesh"
	PeerTypeNodeSpecific   = "node specific"
	PeerTypeGlobal         = "global"
	PeerTypeRouteReflector = "route reflector"
	// PeerTypeLocalWorkload is a session with a pod on this node (a
	// BGPPeer's localWorkloadSelector).
	PeerTypeLocalWorkload = "local workload"
)

// DefaultPort is the BGP port used when nothing else is configured.
const DefaultPort = 179

// Global is the speaker's own identity, computed by confd from the Node
// and BGPConfiguration resources.
type Global struct {
	// ASN is the local AS number.
	ASN uint32
	// RouterID is the node's IPv4 address. It is also the source address
	// of node-to-node IPv4 sessions and the next hop of every advertised
	// IPv4 route. On a node without an IPv4 address it is derived from
	// the node's name (RouterIDDerived), as Calico's CALICO_ROUTER_ID=hash.
	RouterID netip.Addr
	// RouterIDDerived says RouterID is not an address of this node: no
	// IPv4 route is originated (it would have no next hop).
	RouterIDDerived bool
	// IPv6 is the node's IPv6 address: the source of its IPv6 sessions
	// and the next hop of every IPv6 route it originates. Invalid on a
	// node without IPv6: no IPv6 route is originated then.
	IPv6 netip.Addr
	// ListenPort is the configured BGP port (0 means 179). Config.ListenPort
	// overrides it on this process.
	ListenPort uint16
	// LogSeverity is BGPConfiguration's logSeverity for GoBGP's messages
	// ("" leaves the process's logrus level).
	LogSeverity string
	// BindRouterID makes BGP listen on the router ID only (Calico's
	// bindMode: NodeIP) instead of every address.
	BindRouterID bool
}

// String describes g for logs.
func (g Global) String() string {
	s := fmt.Sprintf("AS%d router-id %s port %d", g.ASN, g.RouterID, g.ListenPort)
	if g.IPv6.IsValid() {
		s += " ipv6 " + g.IPv6.String()
	}
	return s
}

// nextHop is the next hop of routes this node originates for prefix: its
// IPv4 or IPv6 address; invalid when it has none of that family.
func (g Global) nextHop(prefix netip.Prefix) netip.Addr {
	if prefix.Addr().Is6() {
		return g.IPv6
	}
	if g.RouterIDDerived {
		return netip.Addr{}
	}
	return g.RouterID
}

// isSelf reports whether a is one of this node's own BGP addresses.
func (g Global) isSelf(a netip.Addr) bool {
	return a == g.RouterID || (g.IPv6.IsValid() && a == g.IPv6)
}

// Valid reports whether g can start a BGP server.
func (g Global) Valid() bool { return g.ASN != 0 && g.RouterID.Is4() }

// Secret is a password that must never be printed or logged: its String,
// GoString and MarshalText all redact it.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<redacted>"
}

// GoString redacts the secret for %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalText redacts the secret in JSON and text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Peer is one BGP session the speaker should have.
type Peer struct {
	// Address is the peer's IPv4 or IPv6 address; sessions are keyed by
	// it. The session carries the unicast family of its address only
	// (IPv4 routes over IPv4 sessions, IPv6 over IPv6), as Calico's
	// separate IPv4 and IPv6 BIRD sessions do.
	Address netip.Addr
	// Port is the peer's BGP port; 0 means 179.
	Port uint16
	// ASN is the peer's AS number; equal to the local one means iBGP.
	ASN uint32
	// Type and Name label the session in status output only; changing
	// them never resets the session.
	Type string
	Name string
	// Password enables TCP MD5 (RFC 2385) when not empty.
	Password Secret
	// ConfigError, when set, says why the session cannot be configured
	// (e.g. its password file is unreadable). The peer is then kept
	// administratively down and the error shown as its INFO.
	ConfigError string
	// LocalAddress is the source address (of the same family as
	// Address); invalid lets the kernel choose.
	LocalAddress netip.Addr
	// Passive waits for the peer to connect instead of dialling, after
	// one attempt at once when the peer is added (third_party/gobgp's
	// patch: a peer that would dial only later, such as calico-node's
	// BIRD in its connect delay, is reached at once). Between two routed
	// nodes one side is passive: GoBGP closes connections that arrive
	// while it sits in Idle after a failure, and two active sides can
	// then keep missing each other.
	Passive bool
	// RRClient marks the peer as a route-reflector client of this node,
	// with RRClusterID as this node's cluster ID.
	RRClient    bool
	RRClusterID string
	// KeepaliveTime and HoldTime override GoBGP's defaults (30 s, 90 s).
	KeepaliveTime time.Duration
	HoldTime      time.Duration
	// RestartTime, when set, is the graceful-restart time announced to
	// this peer instead of Config.RestartTime (Calico's maxRestartTime).
	RestartTime time.Duration
	// AllowOwnAS accepts routes whose AS path holds the local AS up to
	// this many times (Calico's numAllowedLocalASNumbers).
	AllowOwnAS uint32
	// TTLHops, when set, enables GTSM (RFC 5082, Calico's ttlSecurity):
	// packets from the peer must arrive with TTL >= 256 - TTLHops.
	TTLHops uint8
	// KeepOriginalNextHop stops this node rewriting the next hop of the
	// routes it sends to this (eBGP) peer.
	KeepOriginalNextHop bool
	// NextHopSelf makes this node the next hop of every route it sends to
	// this peer, reflected iBGP routes included (Calico's nextHopMode
	// Self).
	NextHopSelf bool
	// LocalASN, when set, is the AS this node presents on this session
	// instead of the global one (Calico's localASNumber).
	LocalASN uint32
	// Multihop lets an eBGP peer be more than one hop away (TTL 255 on
	// the session's packets), as BIRD's "multihop" for Calico's sessions
	// with local workloads. Ignored when TTLHops is set.
	Multihop bool
	// NoAdvertise keeps the routes learned from this peer on this node:
	// they reach the RouteSink but no other peer (a pod peering through
	// localWorkloadSelector, whose routes Calico exports to nobody).
	// GoBGP marks them NO_ADVERTISE on import (noadvertise.go).
	NoAdvertise bool
}

// external reports whether the session with p is eBGP for a node whose
// AS is localASN.
func (p Peer) external(localASN uint32) bool {
	return p.ASN != cmp.Or(p.LocalASN, localASN)
}

// String describes the peer for logs, without the password.
func (p Peer) String() string {
	s := fmt.Sprintf("%s AS%d (%s %s)", p.Address, p.ASN, p.Type, p.Name)
	if p.Password != "" {
		s += " md5"
	}
	if p.RRClient {
		s += " rr-client cluster " + p.RRClusterID
	}
	if p.Passive {
		s += " passive"
	}
	if p.NoAdvertise {
		s += " no-advertise"
	}
	return s
}

// hostPrefix is a as a one-address prefix (a/32 or a/128), as GoBGP's
// neighbor sets want it.
func hostPrefix(a netip.Addr) string {
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// sameSession reports whether a and b describe the same session, ignoring
// the status labels (Type, Name).
func sameSession(a, b Peer) bool {
	a.Type, a.Name = "", ""
	b.Type, b.Name = "", ""
	return a == b
}

// Affinity is a block claimed by a node, as the IPAM watch reports it
// (through the node feed). Only confirmed affinities of the local node
// are advertised.
type Affinity = ipam.Affinity

// Affinity states, as IPAM writes them.
const (
	AffinityPending         = ipam.StatePending
	AffinityConfirmed       = ipam.StateConfirmed
	AffinityPendingDeletion = ipam.StatePendingDeletion
)
