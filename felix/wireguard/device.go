package wireguard

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Peer is one other node as this node's device should know it.
type Peer struct {
	Node      string
	PublicKey wgtypes.Key
	Endpoint  netip.AddrPort
	// AllowedIPs are the addresses the peer may send from and that are
	// sent to it: its blocks, tunnel and node addresses (sorted, masked).
	AllowedIPs []netip.Prefix
	// Keepalive is the persistent keepalive (0: none). Host encryption
	// sets one on a peer until a handshake with it succeeds, so the
	// first handshake happens without waiting for traffic.
	Keepalive time.Duration
}

// Desired is a device as felix wants it. The zero value (Up false) means
// no device.
type Desired struct {
	Up         bool
	PrivateKey wgtypes.Key
	Port       int
	MTU        int
	// FirewallMark marks the device's own UDP packets (0: none); see
	// FirewallMark and HostRule.
	FirewallMark int
	Peers        map[wgtypes.Key]Peer
	// KnownKey: the private key was loaded from its file, not made for
	// this start, so peers may still hold sessions with it (a restart):
	// a new device then greets every peer at once (kick). A new key has
	// no sessions anywhere, and its peers are learning it at the same
	// moment: only the peers this device greets first are greeted.
	KnownKey bool
}

// Device reconciles one WireGuard device (one family). Not safe for
// concurrent use: felix's loop owns it. It outlives felix's Run, so a
// restarted loop keeps the userspace device and its sessions.
type Device struct {
	Name   string
	Mode   string // ModeAuto, ModeKernel or ModeUserspace
	NSPath string // the namespace it lives in ("": this process's)

	dev impl // nil: not made (or removed)
	// fresh: the device was made and has not greeted its peers yet
	// (kick).
	fresh bool
	have  *wgtypes.Device // what the device held when last read
	want  Desired
	log   *logrus.Entry
	// keyEpoch counts the private keys the device has had in this
	// process (a new device, a rotated key); keyAt is when the current
	// one was set: handshakes before it were made with another key.
	keyEpoch int
	keyAt    time.Time
	// regreet are the peers the next Apply makes again (Regreet).
	regreet map[wgtypes.Key]bool
	// nodes is the node of each peer as last configured: a removed
	// key's node, for kickRekeyed.
	nodes map[wgtypes.Key]string
}

// NewDevice returns the reconciler of device name.
func NewDevice(name, mode, nsPath string, lg *logrus.Entry) *Device {
	if lg == nil {
		lg = log
	}
	return &Device{Name: name, Mode: mode, NSPath: nsPath, log: lg.WithField("device", name)}
}

// Set records what the device should be; Apply makes it so.
func (d *Device) Set(want Desired) { d.want = want }

// Kind is "kernel", "userspace" or "" (no device).
func (d *Device) Kind() string {
	if d.dev == nil {
		return ""
	}
	return d.dev.kind()
}

// Ready reports whether the device exists and was configured by the
// last Apply (so routes may point at it).
func (d *Device) Ready() bool { return d.dev != nil && d.have != nil }

// Apply pushes the difference between the wanted and the known state,
// reading the device first when full (a resync) or when nothing is
// known. h is a handle in the device's namespace. It returns the link
// (nil when there is none) for the route table.
func (d *Device) Apply(h *netlink.Handle, full bool) (netlink.Link, error) {
	if !d.want.Up {
		if d.dev == nil && !full {
			return nil, nil // removed already; a resync looks for leftovers
		}
		return nil, d.remove(h)
	}
	link, err := linkByName(h, d.Name)
	if d.dev != nil && err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
		// Not an answer that it is gone (a netlink error): the device
		// and its sessions stay; the next Apply looks again.
		return nil, fmt.Errorf("wireguard: %s: %w", d.Name, err)
	}
	if d.dev != nil && err != nil {
		// Gone under us (deleted by hand, or its process died): start over.
		d.log.WithError(err).Warn("WireGuard device disappeared; making it again")
		_ = d.dev.close()
		d.dev, d.have = nil, nil
	}
	if d.dev == nil {
		dev, err := open(h, d.NSPath, d.Name, d.Mode, d.want.MTU)
		if err != nil {
			return nil, err
		}
		d.dev, d.have, full, d.fresh = dev, nil, true, true
		d.keyEpoch++
		d.log.WithField("implementation", dev.kind()).Info("WireGuard device made")
		if link, err = h.LinkByName(d.Name); err != nil {
			return nil, fmt.Errorf("wireguard: %s: %w", d.Name, err)
		}
	}
	// Up before it is configured: the kernel sends a new peer's greeting
	// keepalive (kick, kickRekeyed, Regreet) only while the interface
	// runs, and unkick puts the keepalive back before a later up would
	// send it. wireguard-go comes up with its configuration (userDev).
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(link); err != nil {
			return link, fmt.Errorf("wireguard: %s: up: %w", d.Name, err)
		}
	}
	if full || d.have == nil {
		if d.have, err = d.dev.read(); err != nil {
			d.have = nil
			return link, fmt.Errorf("wireguard: reading %s: %w", d.Name, err)
		}
	}
	if cfg, changes := diff(d.have, d.want); changes > 0 {
		if cfg.PrivateKey != nil && d.have.PrivateKey != (wgtypes.Key{}) {
			d.keyEpoch++ // a rotation: the sessions of the old key end
			d.keyAt = time.Now()
		}
		fresh := d.fresh && kick(&cfg, d.want.PrivateKey.PublicKey(), d.want.KnownKey)
		rekeyed := 0
		if !fresh {
			rekeyed = kickRekeyed(&cfg, d.have, d.want.PrivateKey.PublicKey(), d.keyAt, d.dev.read, d.nodeOf)
		}
		if err := d.dev.configure(cfg); err != nil {
			d.have = nil
			return link, fmt.Errorf("wireguard: configuring %s: %w", d.Name, err)
		}
		d.noteNodes()
		if rekeyed > 0 {
			d.log.WithField("peers", rekeyed).Info("WireGuard: a peer's key was replaced; greeting it at once")
		}
		if fresh {
			d.fresh = false
		}
		if fresh || rekeyed > 0 {
			if err := d.dev.configure(unkick(cfg, d.want.Peers)); err != nil {
				d.have = nil
				return link, fmt.Errorf("wireguard: configuring %s: %w", d.Name, err)
			}
		}
		if d.have, err = d.dev.read(); err != nil {
			d.have = nil
			return link, fmt.Errorf("wireguard: reading %s: %w", d.Name, err)
		}
		d.log.WithField("changes", changes).Debug("WireGuard device updated")
	} else {
		// Already as wanted (a device adopted at a restart): its peers'
		// nodes are known all the same, for a key replaced next.
		d.noteNodes()
	}
	if err := d.applyRegreets(); err != nil {
		return link, err
	}
	if link.Attrs().MTU != d.want.MTU {
		if err := h.LinkSetMTU(link, d.want.MTU); err != nil {
			return link, fmt.Errorf("wireguard: %s: MTU %d: %w", d.Name, d.want.MTU, err)
		}
	}
	return h.LinkByName(d.Name)
}

// linkByName is (*netlink.Handle).LinkByName; a test makes it fail.
var linkByName = (*netlink.Handle).LinkByName

// kick makes a new device greet its peers at once. A device made again
// (wireguard-go dies with routed) has no sessions while its peers still
// send with theirs, which it cannot read; they would notice only after
// WireGuard's keepalive and rekey timeouts (about 15 s). A peer given a
// persistent keepalive sends one when it starts, and with no session
// that is a handshake, so the peers have new sessions within a round
// trip; unkick then turns the keepalives off again.
// With a new key (all, false) only the peers this device greets first
// (GreetsFirst) are kicked: two devices that learn each other at the
// same moment (a cluster's first start, a node joining while its peers
// bootstrap host encryption) would otherwise both initiate at once, and
// wireguard-go, which handles a peer's handshake messages on several
// goroutines, can then complete one side's handshake under the index of
// its response to the other side's initiation: the handshake counts as
// done on both ends, yet everything the other end sends is dropped
// (unknown receiver index) until the 15-s rekey, seen as host
// connections stalling for 15-20 s after both nodes reported encryption.
// It reports whether cfg has peers to greet.
func kick(cfg *wgtypes.Config, own wgtypes.Key, all bool) bool {
	every := time.Second
	any := false
	for i := range cfg.Peers {
		if !cfg.Peers[i].Remove && (all || GreetsFirst(own, cfg.Peers[i].PublicKey)) {
			cfg.Peers[i].PersistentKeepaliveInterval = &every
			any = true
		}
	}
	return any
}

// noteNodes records the node of each peer the device now has.
func (d *Device) noteNodes() {
	d.nodes = make(map[wgtypes.Key]string, len(d.want.Peers))
	for k, p := range d.want.Peers {
		d.nodes[k] = p.Node
	}
}

// nodeOf is the node of a wanted peer, or of one as last configured.
func (d *Device) nodeOf(k wgtypes.Key) string {
	if p, ok := d.want.Peers[k]; ok {
		return p.Node
	}
	return d.nodes[k]
}

// kickRekeyed greets at once peers cfg adds for the node (node) of a
// peer it removes, or at that peer's endpoint: that node's key was
// replaced (rotated, or the node made
// again with a new key), and the node moved to the new key before
// publishing it, so its own handshake under the new key reached this
// device before this device knew the key and was dropped; WireGuard
// retries only after 5 s (REKEY_TIMEOUT), and until a handshake
// succeeds pod traffic both ways is lost. This device learns the key
// after the node has it, so its greeting is answered within a round
// trip, and it is the only handshake in flight: the node's next retry
// is seconds away. That holds while this device's own key is one the
// node knows, as a handshake with the removed peer since this device's
// key was set (keyAt) shows. Otherwise both keys may be new (both
// rotated, or both made again, at about the same time) and both ends
// learn each other's at about the same moment: then only the end that
// greets first does (GreetsFirst, as kick), or their handshakes cross.
// The node, not only the endpoint: the device reports the address a
// peer last sent from (WireGuard roams to it), which is not its Node
// record's when the node sends from another of its addresses.
// A peer of a new node at a new endpoint (a node joining) is left to
// kick's rule. It returns how many peers it greets; unkick puts their
// keepalives back. node may be nil (endpoints only).
func kickRekeyed(cfg *wgtypes.Config, have *wgtypes.Device, own wgtypes.Key, keyAt time.Time, current func() (*wgtypes.Device, error), node func(wgtypes.Key) string) int {
	if have == nil {
		return 0
	}
	if node == nil {
		node = func(wgtypes.Key) string { return "" }
	}
	known := make(map[wgtypes.Key]bool, len(have.Peers))
	removedAt := map[netip.AddrPort][]wgtypes.Key{}
	removedOf := map[string][]wgtypes.Key{}
	for _, p := range have.Peers {
		known[p.PublicKey] = true
	}
	for _, p := range cfg.Peers {
		if !p.Remove || !known[p.PublicKey] {
			continue
		}
		if n := node(p.PublicKey); n != "" {
			removedOf[n] = append(removedOf[n], p.PublicKey)
		}
		for _, h := range have.Peers {
			if h.PublicKey == p.PublicKey && h.Endpoint != nil {
				ep := unmapped(h.Endpoint)
				removedAt[ep] = append(removedAt[ep], p.PublicKey)
			}
		}
	}
	// replaced are the removed keys each added peer stands in for.
	replaced := map[int][]wgtypes.Key{}
	var added []int
	for i, p := range cfg.Peers {
		if known[p.PublicKey] || p.Remove {
			continue
		}
		var r []wgtypes.Key
		if n := node(p.PublicKey); n != "" {
			r = append(r, removedOf[n]...)
		}
		if p.Endpoint != nil {
			r = append(r, removedAt[unmapped(p.Endpoint)]...)
		}
		if len(r) > 0 {
			replaced[i] = r
			added = append(added, i)
		}
	}
	if len(added) == 0 {
		return 0
	}
	// The handshakes as they are now: the last reading of the device
	// was made when it was last configured, maybe before any.
	now := have
	if current != nil {
		if d, err := current(); err == nil {
			now = d
		}
	}
	last := make(map[wgtypes.Key]time.Time, len(now.Peers))
	for _, p := range now.Peers {
		last[p.PublicKey] = p.LastHandshakeTime
	}
	every := time.Second
	n := 0
	for _, i := range added {
		talked := false
		for _, k := range replaced[i] {
			t := last[k]
			talked = talked || t.Unix() > 0 && t.After(keyAt) // the kernel reports none as 1970
		}
		if !talked && !GreetsFirst(own, cfg.Peers[i].PublicKey) {
			continue
		}
		cfg.Peers[i].PersistentKeepaliveInterval = &every
		n++
	}
	return n
}

func unmapped(a *net.UDPAddr) netip.AddrPort {
	ep := a.AddrPort()
	return netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
}

// GreetsFirst reports whether the device with public key own starts the
// handshake with peer when both could (the lower key does): only one
// end of a pair greets at once (see kick).
func GreetsFirst(own, peer wgtypes.Key) bool { return bytes.Compare(own[:], peer[:]) < 0 }

// unkick puts each greeted peer's keepalive back to the wanted one.
func unkick(cfg wgtypes.Config, want map[wgtypes.Key]Peer) wgtypes.Config {
	out := wgtypes.Config{}
	for _, p := range cfg.Peers {
		if !p.Remove {
			ka := want[p.PublicKey].Keepalive
			out.Peers = append(out.Peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, UpdateOnly: true, PersistentKeepaliveInterval: &ka})
		}
	}
	return out
}

// remove deletes the device (encryption turned off for its family).
func (d *Device) remove(h *netlink.Handle) error {
	var err error
	if d.dev != nil {
		err = d.dev.close()
		d.log.Info("WireGuard device removed: encryption is off for its family")
	}
	d.dev, d.have, d.regreet = nil, nil, nil
	return errors.Join(err, deleteLink(h, d.Name))
}

// Close releases the device held by this process: a userspace device
// (wireguard-go) stops, and its link goes with it; a kernel device's link
// stays (the kernel keeps encrypting) and only the configuration client
// closes. A later Apply makes or adopts the device again. For the end of
// the process (or of a test), never while Apply may run.
func (d *Device) Close() error {
	if d.dev == nil {
		return nil
	}
	var err error
	if k, ok := d.dev.(*kernelDev); ok {
		err = k.c.Close()
	} else {
		err = d.dev.close()
	}
	d.dev, d.have = nil, nil
	if err != nil {
		return fmt.Errorf("wireguard: closing %s: %w", d.Name, err)
	}
	return nil
}

// diff is the configuration that turns have into want, and how many
// changes it holds.
func diff(have *wgtypes.Device, want Desired) (wgtypes.Config, int) {
	var cfg wgtypes.Config
	n := 0
	if have.PrivateKey != want.PrivateKey {
		k := want.PrivateKey
		cfg.PrivateKey = &k
		n++
	}
	if have.ListenPort != want.Port {
		p := want.Port
		cfg.ListenPort = &p
		n++
	}
	if have.FirewallMark != want.FirewallMark {
		m := want.FirewallMark
		cfg.FirewallMark = &m
		n++
	}
	had := make(map[wgtypes.Key]wgtypes.Peer, len(have.Peers))
	for _, p := range have.Peers {
		had[p.PublicKey] = p
		if _, ok := want.Peers[p.PublicKey]; !ok {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
		}
	}
	for _, p := range sortedPeers(want.Peers) {
		if h, ok := had[p.PublicKey]; ok && samePeer(h, p) {
			continue
		}
		ka := p.Keepalive
		cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{
			PublicKey: p.PublicKey, Endpoint: net.UDPAddrFromAddrPort(p.Endpoint),
			ReplaceAllowedIPs: true, AllowedIPs: ipNets(p.AllowedIPs), PersistentKeepaliveInterval: &ka,
		})
	}
	return cfg, n + len(cfg.Peers)
}

func samePeer(h wgtypes.Peer, p Peer) bool {
	if h.Endpoint == nil || h.PersistentKeepaliveInterval != p.Keepalive {
		return false
	}
	if unmapped(h.Endpoint) != p.Endpoint {
		return false
	}
	got := make([]netip.Prefix, 0, len(h.AllowedIPs))
	for _, n := range h.AllowedIPs {
		a, _ := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		got = append(got, netip.PrefixFrom(a.Unmap(), ones).Masked())
	}
	SortPrefixes(got)
	return slices.Equal(got, p.AllowedIPs)
}

// SortPrefixes sorts prefixes by address then length.
func SortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
}

func sortedPeers(m map[wgtypes.Key]Peer) []Peer {
	out := make([]Peer, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		if a.Node < b.Node {
			return -1
		}
		if a.Node > b.Node {
			return 1
		}
		return 0
	})
	return out
}

func ipNets(ps []netip.Prefix) []net.IPNet {
	out := make([]net.IPNet, len(ps))
	for i, p := range ps {
		out[i] = net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	}
	return out
}

// PeerStatus is one peer as the device reports it.
type PeerStatus struct {
	Node          string    `json:"node"`
	PublicKey     string    `json:"publicKey"`
	Endpoint      string    `json:"endpoint"`
	AllowedIPs    []string  `json:"allowedIPs"`
	LastHandshake time.Time `json:"lastHandshake"`
	RxBytes       int64     `json:"rxBytes"`
	TxBytes       int64     `json:"txBytes"`
}

// Status is a device as it is now.
type Status struct {
	Name           string       `json:"name"`
	Implementation string       `json:"implementation"` // kernel or userspace
	PublicKey      string       `json:"publicKey"`
	ListenPort     int          `json:"listenPort"`
	MTU            int          `json:"mtu"`
	Peers          []PeerStatus `json:"peers"`
}

// Read reads the device's live state (handshakes and byte counters move
// without any change of ours); ok is false when there is no device.
func (d *Device) Read() (Status, bool, error) {
	if d.dev == nil {
		return Status{}, false, nil
	}
	dv, err := d.dev.read()
	if err != nil {
		return Status{}, true, fmt.Errorf("wireguard: reading %s: %w", d.Name, err)
	}
	st := Status{Name: d.Name, Implementation: d.dev.kind(), PublicKey: dv.PublicKey.String(), ListenPort: dv.ListenPort, MTU: d.want.MTU}
	nodes := map[wgtypes.Key]string{}
	for k, p := range d.want.Peers {
		nodes[k] = p.Node
	}
	for _, p := range dv.Peers {
		ps := PeerStatus{Node: nodes[p.PublicKey], PublicKey: p.PublicKey.String(), LastHandshake: p.LastHandshakeTime,
			RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes}
		if p.Endpoint != nil {
			ps.Endpoint = p.Endpoint.String()
		}
		for _, n := range p.AllowedIPs {
			ps.AllowedIPs = append(ps.AllowedIPs, n.String())
		}
		st.Peers = append(st.Peers, ps)
	}
	slices.SortFunc(st.Peers, func(a, b PeerStatus) int {
		if a.Node < b.Node {
			return -1
		} else if a.Node > b.Node {
			return 1
		}
		return 0
	})
	return st, true, nil
}

// RunsKey reports whether the device is configured and runs with
// private key k. False while a new key waits to be written by the next
// Apply: the sessions of the running key end then.
func (d *Device) RunsKey(k wgtypes.Key) bool {
	return d.dev != nil && d.have != nil && d.have.PrivateKey == k
}

// KeyEpoch changes whenever the device's private key does (a new
// device, a rotated key): a peer confirmed by a handshake under an
// earlier epoch must be confirmed again.
func (d *Device) KeyEpoch() int { return d.keyEpoch }

// Shaken is a peer that completed a handshake: when it last did, and
// the bytes received from it so far.
type Shaken struct {
	At time.Time
	Rx int64
}

// Handshaken reads the device and returns the peers that completed a
// handshake with its current private key. A completed handshake proves
// both ends hold each other's public key, so traffic sent through the
// device to that peer can be read there.
func (d *Device) Handshaken() (map[wgtypes.Key]Shaken, error) {
	if d.dev == nil {
		return nil, nil
	}
	dv, err := d.dev.read()
	if err != nil {
		return nil, fmt.Errorf("wireguard: reading %s: %w", d.Name, err)
	}
	out := map[wgtypes.Key]Shaken{}
	for _, p := range dv.Peers {
		if p.LastHandshakeTime.Unix() > 0 && p.LastHandshakeTime.After(d.keyAt) { // the kernel reports none as 1970
			out[p.PublicKey] = Shaken{At: p.LastHandshakeTime, Rx: p.ReceiveBytes}
		}
	}
	return out, nil
}
