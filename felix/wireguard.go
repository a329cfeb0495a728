package felix

import (
	"time"

	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
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
	// alias maps a node to the peer of another record with its key and
	// address (one machine under two names).
	alias map[string]string
	// held are the remote nodes whose pod traffic is held, and why.
	held map[string]string
	// refused are the tunnel addresses Node records claim that IPAM
	// does not hold for the node ("node address": why;
	// wireguard_ipam.go).
	refused map[string]string
	// shared are the prefixes two peers' allowed IPs would hold, given
	// to neither ("node prefix": why; dropShared).
	shared map[string]string
	// ownClaimed says which other Node record claims this node's
	// address too: no peer takes it as an allowed IP then, so what
	// this node's host address sends through the device would be
	// dropped there; host traffic goes in clear.
	ownClaimed string
}

// initWireguard fills the plan's WireGuard part from the nodes: every
// other node with an address of the family is reachable over the
// device when it published a key. A Node record's address is its
// writer's claim, and among a peer's allowed IPs it would draw that
// address's traffic, so the peer gets its address as an allowed IP only
// where nothing else holds it: not an address IPAM gives to another
// node (in another node's block, or lent to it: a pod's), not this
// node's own; an address two Node records claim (a stale record of a
// node whose address a new one took, or a forged one) goes to neither
// (dropShared). The peer stays: its blocks are routed to it by IPAM.
func (p *plan) initWireguard(cfg *Config, s *state, pools []*pool) {
	var blocks *blockIndex
	for fam := range p.wg {
		w := &p.wg[fam]
		*w = wgPlan{on: s.wg.on[fam], ready: s.wg.ready[fam], allowClear: cfg.WireGuard.AllowClear,
			dev: wireguard.DeviceV4, port: cfg.WireGuard.Port, src: s.wg.src[fam],
			byAddr: map[netip.Addr]string{}, peers: map[string]*wireguard.Peer{}, held: map[string]string{}, alias: map[string]string{},
			refused: map[string]string{}, shared: map[string]string{}}
		if fam == wg6 {
			w.dev, w.port = wireguard.DeviceV6, cfg.WireGuard.PortV6
		}
		if !w.on {
			continue
		}
		own, _ := nodeAddrOf(s.nodes[cfg.NodeName], fam)
		if own.IsValid() && poolOf(pools, own) != nil {
			if blocks == nil {
				blocks = newBlockIndex(s)
			}
			if holder, what := blocks.holder(own, cfg.NodeName); holder != "" {
				w.ownClaimed = "this node's address " + own.String() + " is a pod address: " + what + " of node " + holder + " (other nodes give it to no peer)"
			}
		}
		seen := map[wgtypes.Key]string{s.wg.own[fam]: cfg.NodeName}
		// By name: of two nodes with one key, the first keeps it, the
		// same on every run and every node.
		for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
			n := s.nodes[name]
			a, ok := nodeAddrOf(n, fam)
			if name == cfg.NodeName || !ok {
				continue
			}
			w.byAddr[a] = name
			pub := n.Status.WireguardPublicKey
			if fam == wg6 {
				pub = n.Status.WireguardPublicKeyV6
			}
			if pub == "" {
				continue
			}
			key, err := wgtypes.ParseKey(pub)
			if err != nil {
				// Not keyless: it wants encryption; clear text is not
				// what AllowClear allows for it.
				w.held[name] = "its published WireGuard key does not parse: " + err.Error()
				continue
			}
			if other, dup := seen[key]; dup {
				if o, ok := nodeAddrOf(s.nodes[other], fam); ok && o == a && other != cfg.NodeName {
					// The same key at the same address: one machine
					// under two names (a node registered again under
					// a new name, its old record left): its traffic
					// goes to the one peer.
					w.alias[name], w.byAddr[a] = other, other
					continue
				}
				// Two peers cannot share a key: neither gets this one.
				w.held[name] = "its WireGuard key is also " + other + "'s (a cloned node?)"
				continue
			}
			seen[key] = name
			peer := &wireguard.Peer{Node: name, PublicKey: key, Endpoint: netip.AddrPortFrom(a, uint16(w.port))}
			why := ""
			switch {
			case a == own:
				why = "node address " + a.String() + " is this node's own"
				w.ownClaimed = "this node's address " + a.String() + " is also claimed by node " + name + " (other nodes give it to no peer)"
			case poolOf(pools, a) != nil:
				if blocks == nil {
					blocks = newBlockIndex(s)
				}
				if holder, what := blocks.holder(a, name); holder != "" {
					why = "node address " + a.String() + " is a pod address: " + what + " of node " + holder
				}
			}
			if why != "" {
				w.refused[name+" "+a.String()] = why
			} else {
				peer.AllowedIPs = []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}
			}
			w.peers[name] = peer
		}
	}
}

// nodeAddrOf is n's address of the family, if it has one.
func nodeAddrOf(n *api.Node, fam int) (netip.Addr, bool) {
	if n == nil {
		return netip.Addr{}, false
	}
	a, ok := n.Address()
	if fam == wg6 {
		a, ok = n.Address6()
	}
	if !ok || (fam == wg4) != a.Addr().Is4() {
		return netip.Addr{}, false
	}
	return a.Addr(), true
}

// blockIndex finds the node IPAM gives an address to: the node it lends
// it to, or the node of the confirmed block holding it (as the import
// guard and ipamOwners count blocks). Built only when a node address
// lies in a pool (an IP reservation, a disabled pool covering the node
// subnets), once per plan.
type blockIndex struct {
	lent   map[netip.Addr]string
	blocks []BlockAffinity // by first address, then size and node: one order on every run
}

func newBlockIndex(s *state) *blockIndex {
	ix := &blockIndex{lent: map[netip.Addr]string{}}
	for _, br := range s.borrowed {
		for a, n := range br {
			ix.lent[a] = n
		}
	}
	for _, a := range s.affinities {
		if a.State == AffinityConfirmed && a.CIDR.IsValid() {
			a.CIDR = a.CIDR.Masked()
			ix.blocks = append(ix.blocks, a)
		}
	}
	slices.SortFunc(ix.blocks, func(x, y BlockAffinity) int {
		if c := x.CIDR.Addr().Compare(y.CIDR.Addr()); c != 0 {
			return c
		}
		if c := x.CIDR.Bits() - y.CIDR.Bits(); c != 0 {
			return c
		}
		return strings.Compare(x.Node, y.Node)
	})
	return ix
}

// holder is the other node IPAM gives a to and how ("" when none, or
// when it gives it to claimant: a block of claimant's holding a counts
// even where a stale block of another node's overlaps it).
func (ix *blockIndex) holder(a netip.Addr, claimant string) (node, what string) {
	if n := ix.lent[a]; n != "" {
		if n == claimant {
			return "", ""
		}
		return n, "lent by IPAM"
	}
	// Blocks hold at most 2^16 addresses (pkg/ipam): every block
	// holding a starts in a's /16 (IPv4) or /112 (IPv6), at or before a.
	lo := netip.PrefixFrom(a, a.BitLen()-16).Masked().Addr()
	end := len(ix.blocks)
	if next := a.Next(); next.IsValid() {
		end, _ = slices.BinarySearchFunc(ix.blocks, next, func(b BlockAffinity, t netip.Addr) int {
			if b.CIDR.Addr().Compare(t) < 0 {
				return -1
			}
			return 1
		})
	}
	for j := end - 1; j >= 0 && ix.blocks[j].CIDR.Addr().Compare(lo) >= 0; j-- {
		b := ix.blocks[j]
		if !b.CIDR.Contains(a) {
			continue
		}
		if b.Node == claimant {
			return "", ""
		}
		if node == "" {
			node, what = b.Node, "in block "+b.CIDR.String()
		}
	}
	return node, what
}

// ipamOwners are the nodes IPAM gives each confirmed block and each
// borrowed address to.
func ipamOwners(s *state) map[netip.Prefix]string {
	out := map[netip.Prefix]string{}
	for _, a := range s.affinities {
		if a.State == AffinityConfirmed && a.CIDR.IsValid() {
			out[a.CIDR.Masked()] = a.Node
		}
	}
	for _, addrs := range s.borrowed {
		for a, node := range addrs {
			out[netip.PrefixFrom(a, a.BitLen())] = node
		}
	}
	return out
}

// poolOf is the pool holding a, or nil.
func poolOf(pools []*pool, a netip.Addr) *pool {
	for _, pl := range pools {
		if pl.cidr.Contains(a) {
			return pl
		}
	}
	return nil
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
	if al := w.alias[node]; al != "" {
		node = al
	}
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
		p.wg[fam].dropShared()
	}
}

// dropShared takes every prefix two peers' allowed IPs hold from all of
// them, and notes why in shared. WireGuard gives a prefix to one peer
// only: configured for two, the last one written takes it, the other
// then differs from the plan, and every Apply hands it back and forth.
// With no peer holding it the device drops its traffic, which the
// routes still send there: held, never in clear.
func (w *wgPlan) dropShared() {
	holders := map[netip.Prefix][]string{}
	for _, name := range slices.Sorted(maps.Keys(w.peers)) {
		for _, pfx := range w.peers[name].AllowedIPs {
			holders[pfx] = append(holders[pfx], name)
		}
	}
	for pfx, names := range holders {
		if len(names) < 2 {
			continue
		}
		for _, name := range names {
			peer := w.peers[name]
			peer.AllowedIPs = slices.DeleteFunc(peer.AllowedIPs, func(q netip.Prefix) bool { return q == pfx })
			w.shared[name+" "+pfx.String()] = pfx.String() + " would be the allowed IP of nodes " + strings.Join(names, " and ") + " at once: neither peer gets it"
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
