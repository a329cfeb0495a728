package felix

import (
	"time"

	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
)

// WireguardConfig turns on WireGuard encryption of pod traffic between
// nodes (Calico's wireguardEnabled and friends). Off by default.
type WireguardConfig struct {
	// Enabled encrypts IPv4 pod traffic to other nodes through wg.routed;
	// EnabledV6 IPv6 pod traffic through wg-v6.routed.
	Enabled, EnabledV6 bool
	// AllowClear sends traffic to a node that has published no key
	// (yet) in the clear, as without encryption. Off by default: such
	// traffic is held (blackholed) until the node's key appears, so
	// turning encryption on never leaks pod traffic in clear text.
	AllowClear bool
	// HostEncryption encrypts traffic between this node's host address
	// and other nodes' too (Calico's wireguardHostEncryptionEnabled), for
	// the families that are on, to every node whose key is known and
	// that completed a handshake; other host traffic stays in clear
	// (wireguard_host.go).
	HostEncryption bool
	// HostSilentAfter is how long a node whose host traffic is encrypted
	// may send nothing through the device (confirmed peers keep a
	// keepalive of a third of it, at most 25 s) before its host traffic
	// goes back to clear text (0: 90 s; tests shorten it).
	HostSilentAfter time.Duration
	// Port and PortV6 are the UDP ports of the devices, the same on
	// every node (default 51820 and 51821).
	Port, PortV6 int
	// MTU and MTUV6 are the devices' MTUs (0: the host MTU less 60,
	// or 80 over IPv6). Pods get the smaller MTU of the devices in use.
	MTU, MTUV6 int
	// Mode is wireguard.ModeAuto (default), ModeKernel or ModeUserspace.
	Mode string
	// KeyDir holds the private keys (wireguard-private-key and
	// wireguard-private-key-v6, mode 0600); default /var/lib/routed.
	KeyDir string
	// PublishKeys is called from felix's loop, without blocking, with
	// this node's public keys ("" for a family that is off) each time
	// they change; the daemon writes them on the Node.
	PublishKeys func(v4, v6 string)
}

func (c WireguardConfig) withDefaults() (WireguardConfig, error) {
	if c.Port == 0 {
		c.Port = wireguard.PortV4
	}
	if c.PortV6 == 0 {
		c.PortV6 = wireguard.PortV6
	}
	for _, p := range [][2]any{{"port", c.Port}, {"IPv6 port", c.PortV6}} {
		if v := p[1].(int); v < 1 || v > 65535 {
			return c, fmt.Errorf("felix: config: WireGuard %s %d: must be 1-65535", p[0], v)
		}
	}
	if c.Enabled && c.EnabledV6 && c.Port == c.PortV6 {
		return c, fmt.Errorf("felix: config: WireGuard ports: IPv4 and IPv6 devices both on port %d; they need one each", c.Port)
	}
	for _, m := range [][2]any{{"MTU", c.MTU}, {"IPv6 MTU", c.MTUV6}} {
		if v := m[1].(int); v != 0 && (v < 1280 || v > 65535) {
			return c, fmt.Errorf("felix: config: WireGuard %s %d: must be 0 (automatic) or 1280-65535", m[0], v)
		}
	}
	switch c.Mode {
	case "":
		c.Mode = wireguard.ModeAuto
	case wireguard.ModeAuto, wireguard.ModeKernel, wireguard.ModeUserspace:
	default:
		return c, fmt.Errorf("felix: config: WireGuard mode %q: want auto, kernel or userspace", c.Mode)
	}
	if c.KeyDir == "" {
		c.KeyDir = filepath.Dir(DefaultMTUFile)
	}
	return c, nil
}

// The two WireGuard families, indexes of the arrays below.
const (
	wg4 = 0
	wg6 = 1
)

func wgFam(a netip.Addr) int {
	if a.Is4() {
		return wg4
	}
	return wg6
}

// wgInputs is what felix's loop tells the plan about WireGuard.
type wgInputs struct {
	on    [2]bool // encryption wanted for the family
	ready [2]bool // the device is made and configured: routes may use it
	own   [2]wgtypes.Key
	// src is the address on the ready device (this Node's
	// spec.wireguard), the source of routes through it; invalid: none.
	src [2]netip.Addr
}

// wgPlan is one family's device as the plan wants it.
type wgPlan struct {
	on, ready  bool
	allowClear bool
	dev        string
	port       int
	// src is the source of routes through the device (wgInputs.src).
	src netip.Addr
	// byAddr finds remote nodes by their address of the family.
	byAddr map[netip.Addr]string
	// peers are the remote nodes with a key, by name.
	peers map[string]*wireguard.Peer
	// held are the remote nodes whose pod traffic is held, and why.
	held map[string]string
	// refused are the tunnel addresses Node records claim that IPAM
	// does not hold for the node ("node address": why;
	// wireguard_ipam.go).
	refused map[string]string
}

// initWireguard fills the plan's WireGuard part from the nodes: every
// other node with an address of the family is reachable over the
// device when it published a key.
func (p *plan) initWireguard(cfg *Config, s *state) {
	for fam := range p.wg {
		w := &p.wg[fam]
		*w = wgPlan{on: s.wg.on[fam], ready: s.wg.ready[fam], allowClear: cfg.WireGuard.AllowClear,
			dev: wireguard.DeviceV4, port: cfg.WireGuard.Port, src: s.wg.src[fam],
			byAddr: map[netip.Addr]string{}, peers: map[string]*wireguard.Peer{}, held: map[string]string{},
			refused: map[string]string{}}
		if fam == wg6 {
			w.dev, w.port = wireguard.DeviceV6, cfg.WireGuard.PortV6
		}
		if !w.on {
			continue
		}
		seen := map[wgtypes.Key]string{s.wg.own[fam]: cfg.NodeName}
		// By name: of two nodes with one key, the first keeps it, the
		// same on every run and every node.
		for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
			n := s.nodes[name]
			if name == cfg.NodeName {
				continue
			}
			a, ok := n.Address()
			if fam == wg6 {
				a, ok = n.Address6()
			}
			if !ok || (fam == wg4) != a.Addr().Is4() {
				continue
			}
			w.byAddr[a.Addr()] = name
			pub := n.Status.WireguardPublicKey
			if fam == wg6 {
				pub = n.Status.WireguardPublicKeyV6
			}
			key, err := wgtypes.ParseKey(pub)
			if pub == "" || err != nil {
				continue
			}
			if other, dup := seen[key]; dup {
				// Two peers cannot share a key: neither gets this one.
				w.held[name] = "its WireGuard key is also " + other + "'s (a cloned node?)"
				continue
			}
			seen[key] = name
			w.peers[name] = &wireguard.Peer{Node: name, PublicKey: key,
				Endpoint:   netip.AddrPortFrom(a.Addr(), uint16(w.port)),
				AllowedIPs: []netip.Prefix{netip.PrefixFrom(a.Addr(), a.Addr().BitLen())}}
		}
	}
}

// heldNoKey is why pod traffic to a node without a key is held.
const heldNoKey = "it has published no WireGuard key (clear text to it needs --wireguard-allow-clear)"

// wgRoute is the route to dst, pod addresses of a pool on node (or on
// the node at nh when node is ""), when WireGuard decides it: through
// the device to a node with a key, held (blackholed) otherwise unless
// clear text is allowed. ok false: WireGuard does not route dst.
func (p *plan) wgRoute(pools []*pool, dst netip.Prefix, nh netip.Addr, node string) (routetable.Route, bool) {
	w := &p.wg[wgFam(dst.Addr())]
	if !w.on || !inPools(pools, dst) {
		return routetable.Route{}, false
	}
	if node == "" {
		if node = w.byAddr[nh]; node == "" {
			return routetable.Route{}, false // not a node: a router's route
		}
	}
	hold := routetable.Route{Dst: dst.Masked(), Type: routetable.Blackhole}
	peer := w.peers[node]
	switch {
	case !w.ready:
		w.held[node] = "this node's WireGuard device " + w.dev + " is not ready"
		return hold, true
	case peer == nil && w.held[node] != "":
		return hold, true
	case peer == nil && w.allowClear:
		return routetable.Route{}, false
	case peer == nil:
		w.held[node] = heldNoKey
		return hold, true
	}
	peer.AllowedIPs = append(peer.AllowedIPs, dst.Masked())
	// The device's address as source: what this host sends the node's
	// pods arrives there from an address it routes back through its
	// own device, so its reverse-path check passes
	// (wireguard_rpfilter.go).
	return routetable.Route{Dst: dst.Masked(), Iface: w.dev, Src: w.src}, true
}

// finishWireguard routes other nodes' borrowed addresses (and their
// VXLAN tunnel addresses) through the device as their blocks are, and
// settles each peer's allowed IPs.
func (p *plan) finishWireguard(cfg *Config, s *state, pools []*pool) {
	for _, addrs := range s.borrowed {
		for a, node := range addrs {
			if node == cfg.NodeName || !p.wg[wgFam(a)].on {
				continue
			}
			dst := netip.PrefixFrom(a, a.BitLen())
			if _, routed := p.routes[dst]; !routed {
				continue // nothing routes it (no BGP and no VXLAN): neither do we
			}
			if r, ok := p.wgRoute(pools, dst, netip.Addr{}, node); ok {
				p.routes[dst] = r
			}
		}
	}
	// Each pool of an encrypted family gets a blackhole under the
	// routes above: pod traffic that no route of ours covers (the
	// userspace device and its routes die with routed, until the next
	// routed holds them itself) is dropped, never sent to the default
	// route in clear.
	for _, pl := range pools {
		if w := &p.wg[wgFam(pl.cidr.Addr())]; w.on {
			if _, ok := p.routes[pl.cidr]; !ok {
				p.routes[pl.cidr] = routetable.Route{Dst: pl.cidr, Type: routetable.Blackhole}
			}
		}
	}
	c := newTunnelAddrCheck(cfg.NodeName, s)
	p.routeWGAddrs(cfg, s, pools, c)
	for fam := range p.wg {
		for name, peer := range p.wg[fam].peers {
			n := s.nodes[name]
			t := n.Spec.IPv4VXLANTunnelAddr
			if fam == wg6 {
				t = n.Spec.IPv6VXLANTunnelAddr
			}
			if a, err := netip.ParseAddr(t); err == nil && wgFam(a) == fam && c.note(p.wg[fam].refused, name, "VXLAN tunnel address", a) {
				peer.AllowedIPs = append(peer.AllowedIPs, netip.PrefixFrom(a, a.BitLen()))
			}
			wireguard.SortPrefixes(peer.AllowedIPs)
			peer.AllowedIPs = compactPrefixes(peer.AllowedIPs)
		}
	}
}

func compactPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := ps[:0]
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

// inPools reports whether dst lies in a pool: only pod traffic goes
// through the device.
func inPools(pools []*pool, dst netip.Prefix) bool {
	for _, pl := range pools {
		if pl.cidr.Contains(dst.Addr()) && pl.cidr.Bits() <= dst.Bits() {
			return true
		}
	}
	return false
}
