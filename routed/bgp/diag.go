package bgp

import (
	"regexp"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// diag remembers, per peer address, why its session last failed and when
// it last went up or down, from GoBGP's peer events (WatchEvent with
// WatchPeer): each state change carries the disconnect reason and, for a
// NOTIFICATION, its code. Status output reads it.
type diag struct {
	mu    sync.Mutex
	peers map[string]*peerDiag
}

type peerDiag struct {
	lastErr string
	// since is when the session last went up or down (or was configured).
	since time.Time
	// hasPassword says a session that never opens may be an MD5 mismatch.
	hasPassword bool
	state       bgp.FSMState
}

func newDiag() *diag { return &diag{peers: map[string]*peerDiag{}} }

// configure registers a peer (and forgets its old errors).
func (d *diag) configure(addr string, hasPassword bool) {
	d.mu.Lock()
	d.peers[addr] = &peerDiag{hasPassword: hasPassword, since: time.Now()}
	d.mu.Unlock()
}

// setPassword records whether the peer uses MD5 without forgetting its
// history (an updated session may or may not have been reset).
func (d *diag) setPassword(addr string, hasPassword bool) {
	d.mu.Lock()
	if p := d.peers[addr]; p != nil {
		p.hasPassword = hasPassword
	}
	d.mu.Unlock()
}

func (d *diag) forget(addr string) {
	d.mu.Lock()
	delete(d.peers, addr)
	d.mu.Unlock()
}

// get returns the last recorded failure of a peer and when its session
// last changed between up and down.
func (d *diag) get(addr string) (lastErr string, since time.Time, hasPassword bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[addr]; p != nil {
		return p.lastErr, p.since, p.hasPassword
	}
	return "", time.Time{}, false
}

// onPeer interprets one GoBGP peer event.
func (d *diag) onPeer(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := ev.Peer.State
	addr := st.NeighborAddress.String()
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peers[addr]
	if p == nil {
		return // not a peer we configured (or already removed)
	}
	wasUp := p.state == bgp.BGP_FSM_ESTABLISHED
	p.state = st.SessionState
	switch {
	case st.SessionState == bgp.BGP_FSM_ESTABLISHED:
		p.lastErr, p.since = "", time.Now()
	case wasUp:
		p.since = time.Now()
	}
	if why := disconnectText(st.DisconnectReason, st.DisconnectMessage, wasUp); why != "" {
		p.lastErr = why
	}
}

// disconnectText says why a session left OpenSent, OpenConfirm or
// Established, from the event's reason and message
// ("notification-received code 2(open) subcode 2(bad peer as)").
func disconnectText(r api.PeerState_DisconnectReason, msg string, wasUp bool) string {
	switch r {
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED:
		return "received notification: " + codeFromString(msg)
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT:
		return "sent notification: " + codeFromString(msg)
	case api.PeerState_DISCONNECT_REASON_BAD_PEER_AS:
		return "sent notification: open: bad peer AS (check AS numbers on both sides)"
	case api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED:
		return "hold timer expired"
	case api.PeerState_DISCONNECT_REASON_READ_FAILED, api.PeerState_DISCONNECT_REASON_WRITE_FAILED:
		return "connection closed by peer"
	case api.PeerState_DISCONNECT_REASON_INVALID_MSG:
		if !wasUp {
			// A NOTIFICATION received before Established is not reported
			// as such; the peer most likely rejected our OPEN.
			return "peer rejected our OPEN (check AS numbers on both sides)"
		}
		return "invalid message from peer"
	case api.PeerState_DISCONNECT_REASON_HARD_RESET:
		return "received notification: cease: hard reset"
	}
	return ""
}

var codeRe = regexp.MustCompile(`code \d+\(([^)]*)\) subcode (\d+)\(([^)]*)\)`)

// ceaseSubcodes names Cease subcodes GoBGP's table lacks (RFC 8538).
var ceaseSubcodes = map[string]string{"9": "hard reset", "10": "BFD down"}

// codeFromString rewrites GoBGP's "code 2(open) subcode 2(bad peer as)"
// as "open: bad peer AS".
func codeFromString(str string) string {
	m := codeRe.FindStringSubmatch(str)
	if m == nil {
		return str
	}
	sub := strings.ReplaceAll(m[3], "peer as", "peer AS")
	if sub == "undefined" && m[1] == "cease" {
		sub = ceaseSubcodes[m[2]]
	}
	if sub == "undefined" || sub == "" {
		return m[1]
	}
	return m[1] + ": " + sub
}
