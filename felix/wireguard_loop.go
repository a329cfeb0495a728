package felix

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/sirupsen/logrus"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix/wireguard"
)

// wgState is felix's WireGuard part. It outlives each Run (so does the
// userspace device in it) and only Run's goroutine touches it.
type wgState struct {
	on         [2]bool
	dev        [2]*wireguard.Device
	keys       [2]wireguard.KeyStore
	key        [2]wgtypes.Key
	hasKey     [2]bool
	keyErr     [2]error
	keyKnown   [2]bool              // the key was loaded from its file (Desired.KnownKey)
	devErr     [2]error             // the last Apply's, for status
	published  [2]string            // public keys last handed to PublishKeys
	held       [2]map[string]string // last held nodes, for logging changes
	refused    [2]map[string]string // last refused tunnel addresses, for logging changes
	shared     [2]map[string]string // last prefixes given to no peer (wgPlan.shared), for logging changes
	published0 bool                 // PublishKeys was called at least once
	addr       [2]netip.Addr        // the address on each device (wireguard_addr.go)
	host       wgHostState          // host encryption (wireguard_host.go)
	// rpfChecked is the index of the IPv4 device whose rp_filter was
	// last checked (rpfAll: all.rp_filter then), rpfWarned the one last
	// warned about and rpfWarnedWhy the cases named (wireguard_rpfilter.go).
	rpfChecked, rpfWarned, rpfAll int
	rpfWarnedWhy                  string
}

func newWGState(cfg *Config, lg *logrus.Entry) *wgState {
	w := &wgState{on: [2]bool{cfg.WireGuard.Enabled, cfg.WireGuard.EnabledV6}}
	w.host.on = cfg.WireGuard.HostEncryption
	if w.host.on && !w.on[wg4] && !w.on[wg6] {
		lg.Warn("WireGuard host encryption is on but WireGuard is off for both families: nothing is encrypted until one is on")
	}
	for fam, name := range []string{wireguard.DeviceV4, wireguard.DeviceV6} {
		w.dev[fam] = wireguard.NewDevice(name, cfg.WireGuard.Mode, cfg.NetNSPath, lg)
	}
	w.keys[wg4] = wireguard.KeyStore{Path: filepath.Join(cfg.WireGuard.KeyDir, wireguard.KeyFileV4)}
	w.keys[wg6] = wireguard.KeyStore{Path: filepath.Join(cfg.WireGuard.KeyDir, wireguard.KeyFileV6)}
	return w
}

// wgMTU is the MTU of the family's device.
func (l *loop) wgMTU(fam int) int {
	if fam == wg4 {
		return WireguardMTU(l.hostMTU, l.cfg.WireGuard.MTU, false)
	}
	return WireguardMTU(l.hostMTU, l.cfg.WireGuard.MTUV6, true)
}

// wgPodMTU lowers the pod MTU to fit the devices in use.
func (l *loop) wgPodMTU(pod int) int {
	for fam, on := range l.f.wg.on {
		if on {
			pod = min(pod, l.wgMTU(fam))
		}
	}
	return pod
}

// applyWireguard makes, configures or removes each family's device
// from the plan, publishes the keys, and when a device became ready (or
// stopped being) recomputes the routes, which go through it only while
// it is ready: until then pod traffic to other nodes is held.
func (l *loop) applyWireguard(full bool) error {
	// A new Run starts from a fresh state while the devices outlive
	// Runs: tell the plan what they are before configuring them, or the
	// first sync would remove every peer (and its session) to add it
	// back a moment later.
	ready, _ := l.wgInputs()
	var err error
	if l.hostKeyChanging(ready) {
		// Host traffic leaves the devices before a key changes (see
		// hostKeyChanging).
		_, err = l.applyHostEncryption(false, ready)
	}
	err = errors.Join(err, l.syncWireguard(full))
	ready, changed := l.wgInputs()
	if changed {
		err = errors.Join(err, l.syncWireguard(false))
	}
	changed, herr := l.applyHostEncryption(full, ready)
	err = errors.Join(err, herr)
	if changed {
		// A peer confirmed (or no longer): its keepalive changes.
		err = errors.Join(err, l.syncWireguard(false))
	}
	l.logHeld()
	return err
}

// wgInputs tells the plan which devices are on and ready, recomputing
// it (and the routes) when that changed; it returns readiness.
func (l *loop) wgInputs() (ready [2]bool, changed bool) {
	w := l.f.wg
	var src [2]netip.Addr
	for fam := range ready {
		ready[fam] = w.dev[fam].Ready() && w.hasKey[fam] && w.on[fam]
		src[fam] = netip.Addr{}
		if ready[fam] {
			src[fam] = w.addr[fam]
		}
		if w.hasKey[fam] {
			l.st.wg.own[fam] = w.key[fam].PublicKey()
		}
	}
	if ready == l.st.wg.ready && w.on == l.st.wg.on && src == l.st.wg.src {
		return ready, false
	}
	l.st.wg.ready, l.st.wg.on, l.st.wg.src = ready, w.on, src
	l.plan = computePlan(l.cfg, l.st)
	if err := l.rt.SetRoutes(l.plan.routes); err != nil {
		l.log.WithError(err).Warn("some routes are invalid and were skipped")
	}
	return ready, true
}

func (l *loop) syncWireguard(full bool) error {
	w := l.f.wg
	var errs []error
	for fam := range w.dev {
		d := w.dev[fam]
		if !w.on[fam] {
			w.hasKey[fam], w.addr[fam] = false, netip.Addr{}
			d.Set(wireguard.Desired{})
			_, err := d.Apply(l.h, full)
			errs = append(errs, err)
			continue
		}
		if !w.hasKey[fam] {
			_, statErr := os.Stat(w.keys[fam].Path)
			w.keyKnown[fam] = statErr == nil
			key, err := w.keys[fam].LoadOrCreate()
			if err != nil {
				if w.keyErr[fam] == nil || w.keyErr[fam].Error() != err.Error() {
					l.log.WithError(err).Error("WireGuard: no private key; pod traffic to other nodes is held")
				}
				w.keyErr[fam] = err
				errs = append(errs, err)
				continue
			}
			w.key[fam], w.hasKey[fam], w.keyErr[fam] = key, true, nil
		}
		l.st.wg.own[fam] = w.key[fam].PublicKey()
		want := wireguard.Desired{Up: true, PrivateKey: w.key[fam], Port: l.plan.wg[fam].port, MTU: l.wgMTU(fam),
			FirewallMark: wireguard.FirewallMark, Peers: map[wgtypes.Key]wireguard.Peer{}, KnownKey: w.keyKnown[fam]}
		for _, p := range l.plan.wg[fam].peers {
			peer := *p
			peer.Keepalive = l.hostKeepalive(fam, p.PublicKey)
			want.Peers[p.PublicKey] = peer
		}
		d.Set(want)
		link, err := d.Apply(l.h, full)
		l.noteDevice(link)
		l.hostLink(link, false)
		if err == nil && link != nil {
			err = l.syncWGAddr(fam, link)
		}
		if err == nil {
			l.wgRPFilter(fam, link, full)
		}
		w.devErr[fam] = err
		errs = append(errs, err)
	}
	l.publishKeys()
	return errors.Join(errs...)
}

// publishKeys hands this node's public keys to the daemon when they
// changed: a family that is off publishes none.
func (l *loop) publishKeys() {
	w := l.f.wg
	var pub [2]string
	for fam := range pub {
		if w.on[fam] && w.hasKey[fam] {
			pub[fam] = w.key[fam].PublicKey().String()
		}
	}
	if pub == w.published && w.published0 {
		return
	}
	w.published, w.published0 = pub, true
	l.log.WithFields(logrus.Fields{"publicKey": pub[wg4], "publicKeyV6": pub[wg6]}).Info("WireGuard public keys")
	if f := l.cfg.WireGuard.PublishKeys; f != nil {
		f(pub[wg4], pub[wg6])
	}
}

// logHeld says once, per node, why its pod traffic is held, and when it
// no longer is.
func (l *loop) logHeld() {
	w := l.f.wg
	for fam := range w.held {
		now := l.plan.wg[fam].held
		for node, why := range now {
			if w.held[fam][node] != why {
				l.log.WithFields(logrus.Fields{"peer": node, "device": l.plan.wg[fam].dev}).Warn("holding pod traffic to node: " + why)
			}
		}
		for node := range w.held[fam] {
			if _, still := now[node]; !still {
				l.log.WithFields(logrus.Fields{"peer": node, "device": l.plan.wg[fam].dev}).Info("pod traffic to node no longer held")
			}
		}
		w.held[fam] = maps.Clone(now)
	}
	l.logRefused()
}

// logRefused says once, per node and address, that an address its Node
// claims is ignored (a tunnel address IPAM does not hold for the node,
// wireguard_ipam.go; a node address initWireguard refuses), and when
// that ends; and the same of prefixes
// given to no peer because two would hold them (wgPlan.dropShared).
func (l *loop) logRefused() {
	w := l.f.wg
	for fam := range w.refused {
		log := func(key string) *logrus.Entry {
			return l.log.WithFields(logrus.Fields{"node": refusedNode(key), "device": l.plan.wg[fam].dev})
		}
		logChanges(&w.refused[fam], l.plan.wg[fam].refused,
			func(key, why string) { log(key).Warn("ignoring an address the node's record claims: " + why) },
			func(key string) {
				log(key).Info("address no longer ignored (IPAM now backs the claim, or the node no longer makes it): " + key)
			})
		logChanges(&w.shared[fam], l.plan.wg[fam].shared,
			func(key, why string) { log(key).Warn("WireGuard: holding traffic to a prefix: " + why) },
			func(key string) { log(key).Info("WireGuard: prefix no longer held, one peer has it: " + key) })
	}
}

// logChanges calls added for each key of now new or changed since last,
// gone for each key of last not in now, and then keeps now in last.
func logChanges(last *map[string]string, now map[string]string, added func(key, why string), gone func(key string)) {
	for key, why := range now {
		if (*last)[key] != why {
			added(key, why)
		}
	}
	for key := range *last {
		if _, still := now[key]; !still {
			gone(key)
		}
	}
	*last = maps.Clone(now)
}

// SetWireguard turns encryption on or off per family while felix runs
// (a FelixConfiguration change). Off removes the device and the
// published key: other nodes then hold traffic to this one unless they
// allow clear text.
func (f *Felix) SetWireguard(enabled, enabledV6 bool) {
	f.enqueue(func(l *loop) {
		if l.f.wg.on != [2]bool{enabled, enabledV6} {
			l.f.wg.on = [2]bool{enabled, enabledV6}
			l.planDirty, l.mtuDirty = true, true
		}
	})
}

// SetWireguardOverride applies FelixConfiguration's wireguardEnabled and
// wireguardEnabledV6: a nil one leaves its family as configured at
// start (routed's flags). Safe for concurrent use; it only queues.
func (f *Felix) SetWireguardOverride(v4, v6 *bool) {
	f.enqueue(func(l *loop) {
		on := [2]bool{l.cfg.WireGuard.Enabled, l.cfg.WireGuard.EnabledV6}
		for fam, p := range []*bool{v4, v6} {
			if p != nil {
				on[fam] = *p
			}
		}
		if on != l.f.wg.on {
			l.log.WithFields(logrus.Fields{"enabled": on[wg4], "enabledV6": on[wg6]}).Info("WireGuard from FelixConfiguration")
			l.f.wg.on = on
			l.planDirty, l.mtuDirty = true, true
			l.hosts.peersDirty = true // host endpoints let the WireGuard ports through
		}
	})
}

// CloseWireguard stops the WireGuard devices this process runs: a
// userspace device (wireguard-go, in this process) and its link go, a
// kernel device stays. The devices outlive Run on purpose (a restarted
// loop keeps their sessions), so whoever ends felix for good (a test's
// cleanup) calls this after the last Run has returned; it refuses while
// Run is active.
func (f *Felix) CloseWireguard() error {
	if !f.running.CompareAndSwap(false, true) {
		return fmt.Errorf("felix: closing WireGuard devices: %w", ErrAlreadyRunning)
	}
	defer f.running.Store(false)
	var errs []error
	for _, d := range f.wg.dev {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// RotateWireguardKeys makes new private keys for the families that are
// on, programs them and publishes the new public keys; it returns them
// ("" for a family that is off).
func (f *Felix) RotateWireguardKeys(ctx context.Context) ([2]string, error) {
	type result struct {
		pub [2]string
		err error
	}
	reply := make(chan result, 1)
	f.enqueue(func(l *loop) {
		w := l.f.wg
		var r result
		for fam := range w.on {
			if !w.on[fam] {
				continue
			}
			key, err := w.keys[fam].Rotate()
			if err != nil {
				r.err = errors.Join(r.err, err)
				continue
			}
			w.key[fam], w.hasKey[fam], w.keyKnown[fam] = key, true, true
			r.pub[fam] = key.PublicKey().String()
		}
		l.planDirty = true
		l.log.WithFields(logrus.Fields{"publicKey": r.pub[wg4], "publicKeyV6": r.pub[wg6]}).Info("WireGuard keys rotated")
		reply <- r
	})
	select {
	case <-ctx.Done():
		return [2]string{}, fmt.Errorf("felix: rotating WireGuard keys: %w", ctx.Err())
	case r := <-reply:
		return r.pub, r.err
	}
}

// WireguardStatus is felix's WireGuard part as it is now.
type WireguardStatus struct {
	Enabled    bool `json:"enabled"`
	EnabledV6  bool `json:"enabledV6"`
	AllowClear bool `json:"allowClear"`
	// HostEncryption: traffic between host addresses is encrypted too,
	// per node as HostPeers say.
	HostEncryption bool               `json:"hostEncryption"`
	Devices        []wireguard.Status `json:"devices"`
	// HostPeers are the other nodes as host encryption treats them
	// (encrypted, or in clear and why); empty while it is off.
	HostPeers []HostPeer `json:"hostPeers,omitempty"`
	// HostWarnings say why host encryption is refused for a family, or
	// what it cannot protect against (incoming ARP not marked).
	HostWarnings []string `json:"hostWarnings,omitempty"`
	// Held are the nodes whose pod traffic is held, and why.
	Held []HeldPeer `json:"held,omitempty"`
	// Errors are why a device that is on is not working.
	Errors []string `json:"errors,omitempty"`
}

// HeldPeer is a node whose pod traffic this node holds.
type HeldPeer struct {
	Node   string `json:"node"`
	Device string `json:"device"`
	Reason string `json:"reason"`
}

// Wireguard reads the devices' live state (peers, handshakes, bytes) on
// felix's loop.
func (f *Felix) Wireguard(ctx context.Context) (WireguardStatus, error) {
	reply := make(chan WireguardStatus, 1)
	f.enqueue(func(l *loop) {
		w := l.f.wg
		st := WireguardStatus{Enabled: w.on[wg4], EnabledV6: w.on[wg6], AllowClear: l.cfg.WireGuard.AllowClear,
			HostEncryption: w.host.on, HostPeers: l.hostPeers(), HostWarnings: l.hostWarnings()}
		for fam, d := range w.dev {
			if e := w.keyErr[fam]; e != nil && w.on[fam] {
				st.Errors = append(st.Errors, e.Error())
			}
			ds, ok, err := d.Read()
			if err != nil {
				st.Errors = append(st.Errors, err.Error())
			}
			if ok {
				st.Devices = append(st.Devices, ds)
			} else if e := w.devErr[fam]; e != nil && w.on[fam] {
				st.Errors = append(st.Errors, e.Error())
			} else if w.on[fam] {
				st.Errors = append(st.Errors, d.Name+": no device")
			}
			if l.plan != nil {
				for _, n := range slices.Sorted(maps.Keys(l.plan.wg[fam].held)) {
					st.Held = append(st.Held, HeldPeer{Node: n, Device: d.Name, Reason: l.plan.wg[fam].held[n]})
				}
			}
		}
		reply <- st
	})
	select {
	case <-ctx.Done():
		return WireguardStatus{}, fmt.Errorf("felix: WireGuard status: %w", ctx.Err())
	case st := <-reply:
		return st, nil
	}
}
