package bgp

import (
	"fmt"
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
// Established, from the event's typed reason; for a NOTIFICATION, also
// its code and subcode (notificationText).
func disconnectText(r api.PeerState_DisconnectReason, msg string, wasUp bool) string {
	switch r {
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED:
		return "received notification: " + notificationText(msg)
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT:
		return "sent notification: " + notificationText(msg)
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

// notificationCode reads a NOTIFICATION's error code and subcode from a
// peer event. GoBGP v4 types the disconnect reason but hands the
// NOTIFICATION itself over only as DisconnectMessage, which it formats
// with bgp.NotificationErrorCode's String ("notification-received code
// 2(open) subcode 2(bad peer as)"); only the two numbers are taken from
// it, and named here (notificationNames) rather than by GoBGP's text.
func notificationCode(msg string) (code, subcode uint8, ok bool) {
	_, c, ok1 := strings.Cut(msg, " code ")
	_, sc, ok2 := strings.Cut(msg, " subcode ")
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(c, "%d(", &code); err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(sc, "%d(", &subcode); err != nil {
		return 0, 0, false
	}
	return code, subcode, true
}

// notificationText names a NOTIFICATION ("open: bad peer AS"); a message
// without a code is returned as it is.
func notificationText(msg string) string {
	code, sub, ok := notificationCode(msg)
	if !ok {
		return msg
	}
	n, known := notificationNames[code]
	if !known {
		return fmt.Sprintf("code %d subcode %d", code, sub)
	}
	if s := n.sub[sub]; s != "" {
		return n.name + ": " + s
	}
	return n.name
}

// notificationNames names NOTIFICATION codes and subcodes (RFC 4271,
// 4486, 7313, 8538 and 9384), by GoBGP's typed constants.
var notificationNames = map[uint8]struct {
	name string
	sub  map[uint8]string
}{
	bgp.BGP_ERROR_MESSAGE_HEADER_ERROR: {"header", map[uint8]string{
		bgp.BGP_ERROR_SUB_CONNECTION_NOT_SYNCHRONIZED: "connection not synchronized",
		bgp.BGP_ERROR_SUB_BAD_MESSAGE_LENGTH:          "bad message length",
		bgp.BGP_ERROR_SUB_BAD_MESSAGE_TYPE:            "bad message type",
	}},
	bgp.BGP_ERROR_OPEN_MESSAGE_ERROR: {"open", map[uint8]string{
		bgp.BGP_ERROR_SUB_UNSUPPORTED_VERSION_NUMBER:        "unsupported version number",
		bgp.BGP_ERROR_SUB_BAD_PEER_AS:                       "bad peer AS",
		bgp.BGP_ERROR_SUB_BAD_BGP_IDENTIFIER:                "bad bgp identifier",
		bgp.BGP_ERROR_SUB_UNSUPPORTED_OPTIONAL_PARAMETER:    "unsupported optional parameter",
		bgp.BGP_ERROR_SUB_DEPRECATED_AUTHENTICATION_FAILURE: "deprecated authentication failure",
		bgp.BGP_ERROR_SUB_UNACCEPTABLE_HOLD_TIME:            "unacceptable hold time",
		bgp.BGP_ERROR_SUB_UNSUPPORTED_CAPABILITY:            "unsupported capability",
	}},
	bgp.BGP_ERROR_UPDATE_MESSAGE_ERROR: {"update", map[uint8]string{
		bgp.BGP_ERROR_SUB_MALFORMED_ATTRIBUTE_LIST:          "malformed attribute list",
		bgp.BGP_ERROR_SUB_UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE: "unrecognized well known attribute",
		bgp.BGP_ERROR_SUB_MISSING_WELL_KNOWN_ATTRIBUTE:      "missing well known attribute",
		bgp.BGP_ERROR_SUB_ATTRIBUTE_FLAGS_ERROR:             "attribute flags error",
		bgp.BGP_ERROR_SUB_ATTRIBUTE_LENGTH_ERROR:            "attribute length error",
		bgp.BGP_ERROR_SUB_INVALID_ORIGIN_ATTRIBUTE:          "invalid origin attribute",
		bgp.BGP_ERROR_SUB_DEPRECATED_ROUTING_LOOP:           "deprecated routing loop",
		bgp.BGP_ERROR_SUB_INVALID_NEXT_HOP_ATTRIBUTE:        "invalid next hop attribute",
		bgp.BGP_ERROR_SUB_OPTIONAL_ATTRIBUTE_ERROR:          "optional attribute error",
		bgp.BGP_ERROR_SUB_INVALID_NETWORK_FIELD:             "invalid network field",
		bgp.BGP_ERROR_SUB_MALFORMED_AS_PATH:                 "malformed as path",
	}},
	bgp.BGP_ERROR_HOLD_TIMER_EXPIRED: {"hold timer expired", nil},
	bgp.BGP_ERROR_FSM_ERROR: {"fsm", map[uint8]string{
		bgp.BGP_ERROR_SUB_RECEIVE_UNEXPECTED_MESSAGE_IN_OPENSENT_STATE:    "receive unexpected message in opensent state",
		bgp.BGP_ERROR_SUB_RECEIVE_UNEXPECTED_MESSAGE_IN_OPENCONFIRM_STATE: "receive unexpected message in openconfirm state",
		bgp.BGP_ERROR_SUB_RECEIVE_UNEXPECTED_MESSAGE_IN_ESTABLISHED_STATE: "receive unexpected message in established state",
	}},
	bgp.BGP_ERROR_CEASE: {"cease", map[uint8]string{
		bgp.BGP_ERROR_SUB_MAXIMUM_NUMBER_OF_PREFIXES_REACHED: "maximum number of prefixes reached",
		bgp.BGP_ERROR_SUB_ADMINISTRATIVE_SHUTDOWN:            "administrative shutdown",
		bgp.BGP_ERROR_SUB_PEER_DECONFIGURED:                  "peer deconfigured",
		bgp.BGP_ERROR_SUB_ADMINISTRATIVE_RESET:               "administrative reset",
		bgp.BGP_ERROR_SUB_CONNECTION_REJECTED:                "connection rejected",
		bgp.BGP_ERROR_SUB_OTHER_CONFIGURATION_CHANGE:         "other configuration change",
		bgp.BGP_ERROR_SUB_CONNECTION_COLLISION_RESOLUTION:    "connection collision resolution",
		bgp.BGP_ERROR_SUB_OUT_OF_RESOURCES:                   "out of resources",
		bgp.BGP_ERROR_SUB_HARD_RESET:                         "hard reset",
		bgp.BGP_ERROR_SUB_HARD_RESET + 1:                     "BFD down",
	}},
	bgp.BGP_ERROR_ROUTE_REFRESH_MESSAGE_ERROR: {"route refresh", map[uint8]string{
		bgp.BGP_ERROR_SUB_INVALID_MESSAGE_LENGTH: "invalid message length",
	}},
}
