// Package status serves the local node's BGP status over a unix socket
// (HTTP with JSON bodies) and reads it back for routedctl.
//
// The socket is local-only and root-only (mode 0600 in a 0700
// directory): it tells which peers exist and why they are down, which is
// operational detail, never secrets. The path defaults to
// DefaultSocketPath and may be changed with --status-socket or the
// ROUTED_STATUS_SOCKET environment variable, read the same way by the
// server (routed) and the client (routedctl).
package status

import (
	"context"
	"os"
	"time"
)

// DefaultSocketPath is where routed serves status unless told otherwise.
const DefaultSocketPath = "/var/run/routed/routed.sock"

// EnvSocket names the environment variable that overrides the socket path.
const EnvSocket = "ROUTED_STATUS_SOCKET"

// SocketPath resolves the socket path: an explicit flag value wins, then
// $ROUTED_STATUS_SOCKET, then DefaultSocketPath.
func SocketPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv(EnvSocket); v != "" {
		return v
	}
	return DefaultSocketPath
}

// Session states shown in the STATE column, as BIRD names its protocol
// states (and calicoctl shows them).
const (
	StateUp    = "up"    // the BGP session is Established
	StateStart = "start" // configured and trying to come up
	StateDown  = "down"  // administratively down (e.g. a configuration error)
)

// Peer is one configured BGP session and how it is doing.
type Peer struct {
	// Address is the peer's IP address.
	Address string `json:"address"`
	// Type says why the session exists: "node-to-node mesh", "node
	// specific", "global" or "route reflector".
	Type string `json:"type"`
	// Name is the peer node's name or the BGPPeer resource's name.
	Name string `json:"name,omitempty"`
	// State is up, start or down (see the State constants).
	State string `json:"state"`
	// BGPState is the RFC 4271 FSM state: Idle, Connect, Active,
	// OpenSent, OpenConfirm or Established.
	BGPState string `json:"bgpState"`
	// Since is when the session entered its current up/down state.
	Since time.Time `json:"since"`
	// Info is "Established" or why the session is not: the FSM state and
	// the last error, e.g. "Active: connect: connection refused".
	Info string `json:"info"`

	LocalASN uint32 `json:"localASN"`
	PeerASN  uint32 `json:"peerASN"`
	// RouterID is the peer's BGP identifier once an OPEN was received.
	RouterID string `json:"routerID,omitempty"`

	// Prefix counters of the session's family (IPv4 unicast on an IPv4
	// session, IPv6 unicast on an IPv6 one).
	Received   uint64 `json:"received"`
	Accepted   uint64 `json:"accepted"`
	Advertised uint64 `json:"advertised"`
	// Message counters since the peer was configured.
	MessagesSent     uint64 `json:"messagesSent"`
	MessagesReceived uint64 `json:"messagesReceived"`
	UpdatesSent      uint64 `json:"updatesSent"`
	UpdatesReceived  uint64 `json:"updatesReceived"`
}

// Established reports whether the session is up.
func (p Peer) Established() bool { return p.State == StateUp }

// Route is one path in the speaker's RIB.
type Route struct {
	Prefix  string `json:"prefix"`
	NextHop string `json:"nextHop"`
	// Peer is the address the path was learned from; empty for a path
	// this node originates.
	Peer string `json:"peer,omitempty"`
	// Local marks a path this node originates (its blocks, borrowed
	// addresses and service CIDRs).
	Local bool `json:"local,omitempty"`
	// Best marks the path chosen for the prefix.
	Best bool `json:"best"`
	// Since is when the path was received or originated.
	Since time.Time `json:"since"`
	// ASPath is the AS path as a space-separated list.
	ASPath string `json:"asPath,omitempty"`
	// Programmed says whether felix has the route in the kernel; nil when
	// it does not apply (local or non-best paths) or no felix runs here.
	Programmed *bool `json:"programmed,omitempty"`
	// Filtered says why felix's import guard keeps the route out of the
	// kernel; empty when it does not.
	Filtered string `json:"filtered,omitempty"`
}

// Process describes the running routed.
type Process struct {
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
	NodeName string    `json:"nodeName"`
	RouterID string    `json:"routerID,omitempty"`
	ASN      uint32    `json:"asn,omitempty"`
	// Listening is the BGP listen port, or -1 when not listening.
	ListenPort int32 `json:"listenPort"`
	// GracefulRestart is on unless disabled; Restarting is true while a
	// restart is in progress (routes from before are being re-sent).
	GracefulRestart bool `json:"gracefulRestart"`
	Restarting      bool `json:"restarting,omitempty"`
	// PeersPending is true until the BGP sessions to hold have been read
	// from the datastore (start-up): until then the session list is
	// empty or incomplete, not a node without peers.
	PeersPending bool `json:"peersPending,omitempty"`
	// ConfigProblem is why BGP cannot be configured from the datastore
	// (no Node resource for this node, no BGP address): the sessions
	// stay pending until it is fixed.
	ConfigProblem string `json:"configProblem,omitempty"`
}

// Provider is what the status server asks. The BGP speaker implements it.
type Provider interface {
	Peers(ctx context.Context) ([]Peer, error)
	Routes(ctx context.Context) ([]Route, error)
	Process(ctx context.Context) (Process, error)
}
