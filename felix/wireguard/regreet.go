package wireguard

import (
	"fmt"
	"net"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Regreet asks the next Apply to make the device start a new handshake
// with peer at once. Neither the kernel nor wireguard-go has a knob for
// that while a session is up: a handshake starts only when there is no
// usable session (or the session is two minutes old and this end
// initiated it), so a peer that stopped being heard keeps its old
// session, and with it no handshake, until its rekey. Apply therefore
// removes the peer (its sessions and counters go with it) and adds it
// back with a persistent keepalive: a new peer with a keepalive sends
// one at once (the kernel's set_peer, wireguard-go's handlePostConfig),
// and with no session that keepalive is a handshake initiation, retried
// every 5 s while it goes unanswered (the keepalive then put back to
// the wanted one keeps retrying after WireGuard's own 90 s). An alive
// peer answers within a round trip, and its answer completes the
// handshake (Handshaken reports it); what it sent under its old session
// meanwhile is dropped, and what this node sends waits for the new one.
//
// Only for a peer nothing was heard from lately (felix's host
// encryption): the session of a peer that talks is never dropped. A
// peer Apply no longer wants is forgotten.
func (d *Device) Regreet(peer wgtypes.Key) {
	if d.regreet == nil {
		d.regreet = map[wgtypes.Key]bool{}
	}
	d.regreet[peer] = true
}

// applyRegreets re-makes the peers Regreet asked for (after the
// difference was pushed, so they are added as wanted now).
func (d *Device) applyRegreets() error {
	if len(d.regreet) == 0 {
		return nil
	}
	every := time.Second
	var drop, add wgtypes.Config
	for k := range d.regreet {
		p, ok := d.want.Peers[k]
		if !ok {
			continue
		}
		drop.Peers = append(drop.Peers, wgtypes.PeerConfig{PublicKey: k, Remove: true})
		add.Peers = append(add.Peers, wgtypes.PeerConfig{PublicKey: k, Endpoint: net.UDPAddrFromAddrPort(p.Endpoint), ReplaceAllowedIPs: true,
			AllowedIPs: ipNets(p.AllowedIPs), PersistentKeepaliveInterval: &every})
	}
	if len(drop.Peers) == 0 {
		clear(d.regreet)
		return nil
	}
	// Separate writes: the removal ends the sessions before the peer is
	// made again, and the greeting keepalive goes back to the wanted one
	// after (as kick and unkick do for a new device).
	for _, cfg := range []wgtypes.Config{drop, add, unkick(add, d.want.Peers)} {
		if err := d.dev.configure(cfg); err != nil {
			d.have = nil
			return fmt.Errorf("wireguard: %s: greeting %d peers again: %w", d.Name, len(drop.Peers), err)
		}
	}
	clear(d.regreet) // kept on an error: the next Apply tries again
	var err error
	if d.have, err = d.dev.read(); err != nil {
		d.have = nil
		return fmt.Errorf("wireguard: reading %s: %w", d.Name, err)
	}
	d.log.WithField("peers", len(drop.Peers)).Debug("WireGuard peers greeted again (sessions dropped, a handshake started)")
	return nil
}
