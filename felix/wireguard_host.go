package felix

import (
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
)

// Host encryption (Calico's wireguardHostEncryptionEnabled): traffic
// from this host to another node's host address goes through the
// family's device, for every node whose key is known AND with which a
// handshake has succeeded under this node's current key. The handshake
// proves the other end knows this node's key, so it can read what is
// sent; until then host traffic to that node stays in clear (never
// held): BGP, etcd and the key publication itself run over it, and a
// node that has not yet seen this node's key (or a rotated one) would
// otherwise drop the replies it needs to learn it (Calico's bootstrap
// problem, felix/wireguard/bootstrap.go there). A confirmed node stays
// encrypted while its key and this node's stay the same and it stays
// alive: confirmed peers send a keepalive at least every third of
// HostSilentAfter, and a peer from which nothing arrived for half of it
// (three quarters on the end that does not greet first) is asked for a
// new handshake (hostProbe): an alive peer answers within a round trip.
// A node from which nothing arrived for HostSilentAfter even so lost
// its device (a reboot, a crash of a userspace device) or cannot be
// reached: its host traffic goes back to clear text, with a warning,
// until a new handshake, which the device keeps asking for every 5 s,
// so a node back (or one wrongly found silent) is encrypted again
// within seconds. Otherwise a rebooted node that must reach etcd or the
// API server on a node still encrypting to it would never read the
// peers it needs to decrypt the replies.
//
// The keepalives alone cannot prove both ends alive: WireGuard restarts
// a peer's keepalive timer on every packet sent or received, so of two
// ends with the same interval the one whose timer fires first can keep
// the other's from ever firing while the link is idle; that end hears
// nothing, though the other is alive. Hence the handshake asked for
// before the silence is judged.
//
// The kernel side, owned here and nowhere else: routes in
// wireguard.RouteTable (protocol 82, through felix's routetable), one
// per confirmed node's host address with this node's address as the
// source, and per family the rule "not fwmark FirewallMark lookup
// RouteTable"; the devices mark their own UDP so it leaves by the main
// table. Turned off, the rule and the routes go. On exit both stay like
// felix's other routes: a kernel device keeps encrypting; a userspace
// device dies with routed and its routes with it, so host traffic falls
// through to the main table (clear) until routed is back.

const (
	// hostBootstrapKeepalive is the keepalive of a peer not confirmed
	// yet: the device greets it (a handshake) as soon as it is
	// configured and again every interval until one succeeds; the end of
	// the pair that does not greet first waits hostGreetGrace before.
	hostBootstrapKeepalive = 5 * time.Second
	// hostGreetGrace is how long the end of a pair that does not greet
	// first (wireguard.GreetsFirst) waits for the other end's handshake
	// before it greets too: both greeting at once can leave a session
	// that only works one way until WireGuard's 15-s rekey (see the
	// wireguard package's kick). Longer than WireGuard's handshake retry
	// (5 s and up to 1/3 s of jitter): the first end's greeting often
	// reaches this one before it has the first end's key (both learn
	// each other's at once) and is retried then; greeting at 1 s crossed
	// that retry or a rotated device's own initiation (1 of 7 rotations
	// under load still broke).
	hostGreetGrace = 7 * time.Second
	// hostCheckEvery is how often the device is read for new handshakes
	// while some peer is not confirmed.
	hostCheckEvery = time.Second
	// hostSilentAfter is HostSilentAfter's default; confirmed peers'
	// keepalive is a third of it, at most hostLiveKeepalive.
	hostSilentAfter   = 90 * time.Second
	hostLiveKeepalive = 25 * time.Second
)

// hostSilence is how long a confirmed peer may stay silent, and how
// often its keepalive and the check of the device run.
func (l *loop) hostSilence() (silent, keepalive, check time.Duration) {
	silent = l.cfg.WireGuard.HostSilentAfter
	if silent <= 0 {
		silent = hostSilentAfter
	}
	keepalive = max(min(silent/3, hostLiveKeepalive), time.Second).Truncate(time.Second)
	return silent, keepalive, max(silent/6, time.Second)
}

// wgHostRouting is the kernel state of host encryption for one Run.
type wgHostRouting struct {
	rt   *routetable.RouteTable
	rule [2]*wireguard.HostRule
	mark *wireguard.IncomingMark
	// srcValidMark: net.ipv4.conf.all.src_valid_mark was set to 1.
	srcValidMark bool
	// refusal is why IPv4 host encryption is refused (hostV4Refusal),
	// read at refusalAt for uplink with the ARP marked or not as arpOK.
	refusal   string
	refusalAt time.Time
	uplink    string
	arpOK     bool
}

// hostRefusalEvery is how often the ARP sysctls are read again while
// host encryption is wanted (also at every full resync, and when the
// uplink or the ARP marking changes).
const hostRefusalEvery = 5 * time.Second

// hostARPProbe, when set (tests), replaces the IncomingMark's probe of
// nftables' arp family in the Runs started after.
var hostARPProbe atomic.Pointer[func(*nftables.Conn) error]

// wgHostState is the host encryption part of wgState (it outlives Runs,
// as the devices whose handshakes it records do).
type wgHostState struct {
	on bool                    // host encryption wanted
	ok [2]map[wgtypes.Key]bool // peers confirmed by a handshake
	// rx and rxAt: the bytes received from each peer and when they last
	// grew; lostAt: when a peer was last found silent (a new handshake
	// after it confirms it again).
	rx     [2]map[wgtypes.Key]int64
	rxAt   [2]map[wgtypes.Key]time.Time
	lostAt [2]map[wgtypes.Key]time.Time
	// probedAt: when a new handshake with the peer was last asked for
	// (hostProbe); one per silence.
	probedAt [2]map[wgtypes.Key]time.Time
	// waitFrom: since when this node has waited for the handshake of a
	// peer that greets first (hostGreetGrace).
	waitFrom [2]map[wgtypes.Key]time.Time
	epoch    [2]int       // the device key epoch ok is for
	checkAt  [2]time.Time // last read of the handshakes
	queued   bool         // a recheck is queued on the loop
	// clear are the nodes whose host traffic goes in clear, and why;
	// enc the nodes whose host traffic is encrypted (for status and to
	// log changes).
	clear [2]map[string]string
	enc   [2]map[string]bool
	// refused is why IPv4 host encryption is refused ("" when it is
	// not), arpUnmarked why incoming ARP is not marked: for status, and
	// to log each once.
	refused, arpUnmarked string
}

// hostRouting returns this Run's host routing, made on first use.
func (l *loop) hostRouting() *wgHostRouting {
	if l.wgHost == nil {
		l.wgHost = &wgHostRouting{
			rt: routetable.New(routetable.Config{Protocol: l.cfg.RouteProtocol, Table: wireguard.RouteTable,
				Log: l.log.WithField("part", "wireguard-host")}, l.kernel),
			rule: [2]*wireguard.HostRule{{Family: netlink.FAMILY_V4}, {Family: netlink.FAMILY_V6}},
			mark: &wireguard.IncomingMark{NetNSFd: -1, WorkloadPrefix: l.cfg.WorkloadInterfacePrefix},
		}
		if p := hostARPProbe.Load(); p != nil {
			l.wgHost.mark.ARPFamily = *p
		}
		if l.nsh.IsOpen() {
			l.wgHost.mark.NetNSFd = int(l.nsh)
		}
	}
	return l.wgHost
}

// hostLink tells the host table about a link (the devices).
func (l *loop) hostLink(link netlink.Link, deleted bool) {
	if l.wgHost == nil || link == nil {
		return
	}
	a := link.Attrs()
	if a.Name == wireguard.DeviceV4 || a.Name == wireguard.DeviceV6 {
		l.wgHost.rt.OnLinkUpdate(routetable.Link{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0}, deleted)
	}
}

// hostKeepalive is the keepalive peer p of family fam should have.
func (l *loop) hostKeepalive(fam int, p wgtypes.Key) time.Duration {
	h := &l.f.wg.host
	switch {
	case !h.on:
		return 0
	case !h.ok[fam][p]:
		if wireguard.GreetsFirst(l.f.wg.key[fam].PublicKey(), p) {
			return hostBootstrapKeepalive
		}
		// The peer greets first: greet too only if its handshake has
		// not come within the grace (it may not encrypt host traffic).
		if h.waitFrom[fam] == nil {
			h.waitFrom[fam] = map[wgtypes.Key]time.Time{}
		}
		since, ok := h.waitFrom[fam][p]
		if !ok {
			since = time.Now()
			h.waitFrom[fam][p] = since
		}
		if time.Since(since) >= hostGreetGrace {
			return hostBootstrapKeepalive
		}
		return 0
	}
	delete(h.waitFrom[fam], p)
	_, keepalive, _ := l.hostSilence()
	return keepalive
}

// applyHostEncryption programs the host routes and rules for the
// devices that are ready; it reports whether a peer's confirmation
// changed (its keepalive must then change too).
func (l *loop) applyHostEncryption(full bool, ready [2]bool) (bool, error) {
	w := l.f.wg
	h := &w.host
	hr := l.hostRouting()
	routes := map[netip.Prefix]routetable.Route{}
	var errs []error
	changed := false
	pending := false
	// The reverse-path check must see the uplinks' packets past the
	// rule before any route of table 82 exists (wireguard.IncomingMark).
	anyOn := h.on && ((w.on[wg4] && ready[wg4]) || (w.on[wg6] && ready[wg6]))
	hr.mark.Set(anyOn)
	var hostErr error // host encryption's kernel state could not be written
	if err := hr.mark.Apply(full); err != nil {
		hostErr = err // no routes through the devices: rp_filter could drop the peers' UDP
	}
	if anyOn && hostErr == nil && (full || !hr.srcValidMark) {
		_, err := writeSysctls(l.cfg.NetNSPath, []sysctl{{path: "net/ipv4/conf/all/src_valid_mark", value: "1"}})
		hr.srcValidMark = err == nil
		hostErr = err
	}
	if hostErr != nil {
		errs = append(errs, hostErr)
		anyOn = false
	}
	var refused [2]string
	checked := anyOn && w.on[wg4] && ready[wg4]
	if checked {
		r, err := l.hostRefusal(full, hr)
		if err != nil {
			r = "the ARP settings could not be read: " + err.Error()
			errs = append(errs, err)
		}
		refused[wg4] = r
	}
	l.noteHostRefusal(refused[wg4], checked, hr.mark.ARPUnmarked())
	for fam := range w.dev {
		on := anyOn && w.on[fam] && ready[fam] && refused[fam] == ""
		clear, enc := map[string]string{}, map[string]bool{}
		if !on && h.on && w.on[fam] {
			// Wanted but not possible: in clear (never held), and say why.
			why := "this node's WireGuard device " + l.plan.wg[fam].dev + " is not ready"
			switch {
			case hostErr != nil && ready[fam]:
				why = "host encryption's kernel state could not be written: " + hostErr.Error()
			case refused[fam] != "":
				why = "host encryption refused: " + refused[fam]
			}
			for _, node := range l.plan.wg[fam].byAddr {
				clear[node] = why
			}
		}
		if on {
			c, err := l.refreshHandshakes(fam, full)
			changed = changed || c
			errs = append(errs, err)
			own := l.plan.nodeAddr
			if fam == wg6 {
				own = l.plan.nodeAddr6
			}
			pw := &l.plan.wg[fam]
			for addr, node := range pw.byAddr {
				peer := pw.peers[node]
				switch {
				case peer == nil && pw.held[node] != "" && pw.held[node] != heldNoKey:
					clear[node] = pw.held[node]
				case peer == nil:
					clear[node] = "it has published no WireGuard key"
				case !own.IsValid() || wgFam(own.Addr()) != fam:
					clear[node] = "this node's own address of the family is unknown"
				case pw.ownClaimed != "":
					clear[node] = pw.ownClaimed
				case !slices.Contains(peer.AllowedIPs, netip.PrefixFrom(addr, addr.BitLen())):
					// Refused or claimed twice (initWireguard): the
					// device would drop what a route sent it.
					why := pw.refused[node+" "+addr.String()]
					if why == "" {
						why = pw.shared[node+" "+netip.PrefixFrom(addr, addr.BitLen()).String()]
					}
					clear[node] = "its address is not among its allowed IPs: " + why
				case !h.ok[fam][peer.PublicKey]:
					clear[node] = "no WireGuard handshake with it yet under the current keys"
					pending = true
				default:
					dst := netip.PrefixFrom(addr, addr.BitLen())
					routes[dst] = routetable.Route{Dst: dst, Iface: pw.dev, Src: own.Addr()}
					enc[node] = true
				}
			}
		}
		l.logHostChanges(fam, clear, enc)
		h.clear[fam], h.enc[fam] = clear, enc
		hr.rule[fam].Set(on)
		errs = append(errs, hr.rule[fam].Apply(l.h, full))
	}
	if err := hr.rt.SetRoutes(routes); err != nil {
		errs = append(errs, err)
	}
	if full {
		hr.rt.Resync()
	}
	errs = append(errs, hr.rt.Apply())
	switch {
	case pending:
		l.queueHostCheck(hostCheckEvery)
	case anyOn:
		_, _, check := l.hostSilence()
		l.queueHostCheck(check) // for peers gone silent
	}
	return changed, errors.Join(errs...)
}

// refreshHandshakes records the peers of family fam confirmed by a
// handshake: all over again when the device's key changed, and by
// reading the device (at most every hostCheckEvery, or on a resync)
// while one is not confirmed. It reports whether the set changed.
func (l *loop) refreshHandshakes(fam int, full bool) (bool, error) {
	h := &l.f.wg.host
	d := l.f.wg.dev[fam]
	changed := false
	changing := l.ownKeyChanging(fam)
	if e := d.KeyEpoch(); e != h.epoch[fam] || h.ok[fam] == nil || changing {
		h.epoch[fam], h.ok[fam], changed = e, map[wgtypes.Key]bool{}, true
		h.waitFrom[fam] = map[wgtypes.Key]time.Time{}
		h.rx[fam], h.rxAt[fam], h.lostAt[fam] = map[wgtypes.Key]int64{}, map[wgtypes.Key]time.Time{}, map[wgtypes.Key]time.Time{}
		h.probedAt[fam] = map[wgtypes.Key]time.Time{}
	}
	if changing {
		// The device still runs the old key: its handshakes are the old
		// key's and must not confirm anyone (read now, they would put the
		// host routes back before the new key is written).
		return changed, nil
	}
	peers := map[wgtypes.Key]bool{}
	need := false
	for _, p := range l.plan.wg[fam].peers {
		peers[p.PublicKey] = true
		need = need || !h.ok[fam][p.PublicKey]
	}
	for k := range h.ok[fam] {
		if !peers[k] {
			delete(h.ok[fam], k) // gone, or its key changed: confirm the new one
			changed = true
		}
	}
	for k := range h.rx[fam] {
		if !peers[k] {
			delete(h.rx[fam], k)
			delete(h.rxAt[fam], k)
			delete(h.lostAt[fam], k)
			delete(h.probedAt[fam], k)
			delete(h.waitFrom[fam], k)
		}
	}
	silent, _, check := l.hostSilence()
	every := check
	if need {
		every = hostCheckEvery
	}
	if !full && time.Since(h.checkAt[fam]) < every {
		return changed, nil
	}
	now := time.Now()
	h.checkAt[fam] = now
	shaken, err := d.Handshaken()
	if err != nil {
		return changed, err
	}
	for k := range peers {
		s, ok := shaken[k]
		// Heard from: bytes arrived since the last read, or a handshake
		// since it was last heard (a peer made again by a probe starts
		// its counters from zero).
		if ok && (s.Rx != h.rx[fam][k] || s.At.After(h.rxAt[fam][k])) {
			h.rx[fam][k], h.rxAt[fam][k] = s.Rx, now
		}
		quiet := now.Sub(h.rxAt[fam][k])
		probed := h.probedAt[fam][k].After(h.rxAt[fam][k]) // during this silence
		switch {
		case !h.ok[fam][k] && ok && s.At.After(h.lostAt[fam][k]):
			h.ok[fam][k], h.rxAt[fam][k], changed = true, now, true
		case h.ok[fam][k] && quiet > silent:
			delete(h.ok[fam], k)
			h.lostAt[fam][k], changed = now, true
			h.rx[fam][k] = s.Rx // kept (and forgotten with the peer) with lostAt
			l.log.WithFields(logrus.Fields{"peer": l.plan.wg[fam].nodeOfKey(k), "device": l.plan.wg[fam].dev, "silentFor": quiet.Round(time.Second)}).
				Warn("nothing from node through WireGuard lately (rebooted, its routed gone, or its UDP blocked): its host traffic goes in clear until it handshakes again")
			if !probed {
				// Not asked yet (the loop was held up): ask now, or its
				// old session would keep a handshake away for minutes.
				l.hostProbe(fam, k, now)
			}
		case h.ok[fam][k] && quiet > l.hostProbeAfter(fam, k) && !probed:
			l.hostProbe(fam, k, now)
			changed = true // the device must be written
		}
	}
	return changed, nil
}

// hostProbeAfter is how long a confirmed peer may stay unheard before
// a new handshake with it is asked for: half the silence limit on the
// end of the pair that greets first, three quarters on the other, so
// when both hear nothing (a link down) only one starts a handshake at a
// time (crossed handshakes: the wireguard package's kick).
func (l *loop) hostProbeAfter(fam int, p wgtypes.Key) time.Duration {
	silent, _, _ := l.hostSilence()
	if wireguard.GreetsFirst(l.f.wg.key[fam].PublicKey(), p) {
		return silent / 2
	}
	return silent * 3 / 4
}

// hostProbe asks family fam's device for a new handshake with peer p
// (wireguard.Device.Regreet: its old session goes), written by the
// next Apply; the handshake's completion is what refreshHandshakes
// looks for.
func (l *loop) hostProbe(fam int, p wgtypes.Key, now time.Time) {
	h := &l.f.wg.host
	h.probedAt[fam][p] = now
	l.f.wg.dev[fam].Regreet(p)
	l.log.WithFields(logrus.Fields{"peer": l.plan.wg[fam].nodeOfKey(p), "device": l.plan.wg[fam].dev, "quietFor": now.Sub(h.rxAt[fam][p]).Round(time.Second)}).
		Debug("nothing from node through WireGuard for a while: asking it for a new handshake")
}

// hostKeyChanging reports whether host traffic goes through a ready
// device of a family whose sessions the next device write ends: this
// node's key changes (its rotation: felix's key is not the one the
// device runs), or the key of a node whose host traffic is encrypted
// changed (its rotation: the device swaps the peer, dropping its
// sessions). The host routes through the device must go before that
// write (applyWireguard), never after: host packets routed into a
// device with no session make it start a handshake at once, which
// crosses the handshake the other end starts when it learns the new
// key. Crossed handshakes can leave a session both ends count as done
// while one end drops what the other sends (the wireguard package's
// kick): host traffic was lost for 10-15 s after both nodes said
// encrypted again (issue 40).
func (l *loop) hostKeyChanging(ready [2]bool) bool {
	h := &l.f.wg.host
	for fam := range ready {
		if !ready[fam] || !h.on {
			continue
		}
		if l.ownKeyChanging(fam) {
			return true
		}
		for node := range h.enc[fam] {
			if p := l.plan.wg[fam].peers[node]; p == nil || !h.ok[fam][p.PublicKey] {
				return true
			}
		}
	}
	return false
}

// ownKeyChanging: host encryption is on and family fam's device runs
// with a key other than felix's (a rotation not written yet); the
// peers' confirmations are for the old key.
func (l *loop) ownKeyChanging(fam int) bool {
	w := l.f.wg
	return w.host.on && w.on[fam] && w.hasKey[fam] && w.dev[fam].Ready() && !w.dev[fam].RunsKey(w.key[fam])
}

// queueHostCheck wakes the loop after a while to look for new or stale
// handshakes (one wake-up queued at a time).
func (l *loop) queueHostCheck(after time.Duration) {
	h := &l.f.wg.host
	if h.queued {
		return
	}
	h.queued = true
	f := l.f
	time.AfterFunc(after, func() {
		f.enqueue(func(l *loop) { l.f.wg.host.queued = false })
	})
}

// logHostChanges says when a node's host traffic becomes encrypted or
// goes (back) to clear text, and why.
func (l *loop) logHostChanges(fam int, clear map[string]string, enc map[string]bool) {
	h := &l.f.wg.host
	dev := l.plan.wg[fam].dev
	for node := range enc {
		if !h.enc[fam][node] {
			l.log.WithFields(logrus.Fields{"peer": node, "device": dev}).Info("host traffic to node is encrypted")
		}
	}
	for node, why := range clear {
		if h.clear[fam][node] != why {
			l.log.WithFields(logrus.Fields{"peer": node, "device": dev}).Info("host traffic to node goes in clear: " + why)
		}
	}
	for node := range h.enc[fam] {
		if _, still := enc[node]; !still && clear[node] == "" {
			l.log.WithFields(logrus.Fields{"peer": node, "device": dev}).Info("host traffic to node is no longer routed through WireGuard")
		}
	}
}

// hostPeers is the status's view of host encryption.
func (l *loop) hostPeers() []HostPeer {
	h := &l.f.wg.host
	var out []HostPeer
	for fam := range h.clear {
		dev := wireguard.DeviceV4
		if fam == wg6 {
			dev = wireguard.DeviceV6
		}
		for _, n := range sortedKeys(h.enc[fam]) {
			out = append(out, HostPeer{Node: n, Device: dev, Encrypted: true})
		}
		for _, n := range sortedKeys(h.clear[fam]) {
			out = append(out, HostPeer{Node: n, Device: dev, Reason: h.clear[fam][n]})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// HostPeer is another node as host encryption treats it: its host
// traffic goes through Device, or in clear for Reason.
type HostPeer struct {
	Node      string `json:"node"`
	Device    string `json:"device"`
	Encrypted bool   `json:"encrypted"`
	Reason    string `json:"reason,omitempty"`
}

// SetWireguardHostEncryption turns host encryption on or off while
// felix runs (routed's flag at start; tests).
func (f *Felix) SetWireguardHostEncryption(on bool) {
	f.enqueue(func(l *loop) { l.setHostEncryption(on) })
}

// SetWireguardHostOverride applies FelixConfiguration's
// wireguardHostEncryptionEnabled: nil leaves routed's flag in force.
// Safe for concurrent use; it only queues.
func (f *Felix) SetWireguardHostOverride(on *bool) {
	f.enqueue(func(l *loop) {
		v := l.cfg.WireGuard.HostEncryption
		if on != nil {
			v = *on
		}
		l.setHostEncryption(v)
	})
}

func (l *loop) setHostEncryption(on bool) {
	h := &l.f.wg.host
	if on == h.on {
		return
	}
	h.on = on
	l.log.WithField("hostEncryption", on).Info("WireGuard host encryption")
	if on && !l.f.wg.on[wg4] && !l.f.wg.on[wg6] {
		l.log.Warn("WireGuard host encryption is on but WireGuard is off for both families: nothing is encrypted until one is on")
	}
}

// nodeOfKey names the peer with public key k (the key itself if none).
func (w *wgPlan) nodeOfKey(k wgtypes.Key) string {
	for name, p := range w.peers {
		if p.PublicKey == k {
			return name
		}
	}
	return k.String()
}
