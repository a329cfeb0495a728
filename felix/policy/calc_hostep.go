package policy

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// Host endpoints (Calico's HostEndpoint). Every host endpoint of the
// cluster is an endpoint of the calculator, like a pod, keyed
// "hep:<name>" and marked Host: its expected addresses join the sets
// whose selectors pick it, and its group answers which policies apply.
// This node's host endpoints with an interface also get chains, one per
// context (see nftdp/hostep.go), from the policies that apply:
//
//   - own traffic (to and from the host's processes): the policies that
//     are neither doNotTrack nor preDNAT, then its profiles, then drop;
//   - forwarded traffic: the applyOnForward ones among those, then drop;
//     none: forwarded traffic passes (Calico's);
//   - before DNAT (ingress) and before conntrack (named interfaces
//     only): the preDNAT and doNotTrack policies, whose Allow sets the
//     accept bit (and does not track), and whose tiers do not drop at
//     their end: what no rule decides goes on to normal policy.
//
// doNotTrack and preDNAT policies never apply to pods.

// hostKeyPrefix starts the calculator's key of a host endpoint; a
// WorkloadEndpoint's name has no ':'.
const hostKeyPrefix = "hep:"

// HostEndpointKey is the calculator's key of the named HostEndpoint.
func HostEndpointKey(name string) string { return hostKeyPrefix + name }

// IsHostEndpointKey reports whether key is a host endpoint's.
func IsHostEndpointKey(key string) bool { return strings.HasPrefix(key, hostKeyPrefix) }

// HostPort is a failsafe port (protocol number and port).
type HostPort = nftdp.ProtoPort

// DefaultFailsafeInbound are Calico's failsafe ports to the host: SSH,
// DHCP, BGP, etcd, Typha, the Kubernetes API server and etcd's old
// ports.
func DefaultFailsafeInbound() []HostPort {
	return []HostPort{{Proto: 6, Port: 22}, {Proto: 17, Port: 68}, {Proto: 6, Port: 179}, {Proto: 6, Port: 2379},
		{Proto: 6, Port: 2380}, {Proto: 6, Port: 5473}, {Proto: 6, Port: 6443}, {Proto: 6, Port: 6666}, {Proto: 6, Port: 6667}}
}

// DefaultFailsafeOutbound are Calico's failsafe ports from the host:
// DNS, DHCP, BGP, etcd, Typha, the Kubernetes API server.
func DefaultFailsafeOutbound() []HostPort {
	return []HostPort{{Proto: 17, Port: 53}, {Proto: 17, Port: 67}, {Proto: 6, Port: 179}, {Proto: 6, Port: 2379},
		{Proto: 6, Port: 2380}, {Proto: 6, Port: 5473}, {Proto: 6, Port: 6443}, {Proto: 6, Port: 6666}, {Proto: 6, Port: 6667}}
}

// HostEndpoint is a host endpoint as the calculator needs it.
type HostEndpoint struct {
	// Key is HostEndpointKey(name).
	Key string
	// Iface is the interface it names, "*" for all of them, or "" when
	// it names none and is found by its IPs: then Found are the
	// interfaces of this node holding one of them, and it governs each
	// (Calico's); none found, it is not dispatched (see
	// Manager.SetHostEndpoint).
	Iface string
	Found []string
	// Local: on this node (only then it has chains).
	Local    bool
	Node     string
	Labels   map[string]string
	Profiles []string
	IPs      []netip.Prefix
	Ports    []NamedPort
}

// hostFlags are a policy's host endpoint fields.
type hostFlags struct{ doNotTrack, preDNAT, applyOnForward bool }

func hostFlagsOf(p api.Policy) hostFlags {
	g, ok := p.(*api.GlobalNetworkPolicy)
	if !ok {
		return hostFlags{}
	}
	return hostFlags{doNotTrack: g.Spec.DoNotTrack, preDNAT: g.Spec.PreDNAT, applyOnForward: g.Spec.ApplyOnForward}
}

// only reports whether the policy applies to host endpoints only.
func (h hostFlags) only() bool { return h.doNotTrack || h.preDNAT }

// allows rewrites a policy chain's Allow for its context: a doNotTrack
// Allow also stops tracking, and both it and a preDNAT Allow set the
// accept bit, so that normal policy lets the packet through later.
func (h hostFlags) allows(rules []nftdp.Rule) []nftdp.Rule {
	if !h.only() {
		return rules
	}
	for i := range rules {
		if rules[i].Action == nftdp.ActAccept {
			rules[i].Action = nftdp.ActMarkAccept
			if h.doNotTrack {
				rules[i].Action = nftdp.ActNotrack
			}
		}
	}
	return rules
}

// picks reports whether the policy applies to group g.
func (p *cpolicy) picks(g *group) bool {
	if g.host && !p.hostsOnly {
		// What stands for an unreadable HostEndpoint has its deny
		// alone (SetUnreadableHost): another policy picking it by its
		// lack of labels would allow what the record may not.
		if _, standIn := g.own.get(UnreadableHostLabel); standIn {
			return false
		}
	}
	return (!p.host.only() || g.host) && !(p.workloadsOnly && g.host) && !(p.hostsOnly && !g.host) && p.sel.group(g)
}

// hostState is the calculator's host endpoint state.
type hostState struct {
	eps              map[string]*hostEP // this node's, by key
	failIn, failOut  []HostPort
	failSet, touched bool
	peers            []netip.Prefix    // the nodes (SetTunnelPeers)
	tunnelPorts      []uint16          // their tunnels' UDP ports (SetTunnelPeers)
	indexed          map[string]string // named interface -> the key the rule index names (indexHosts)
}

// hostEP is one of this node's host endpoints.
type hostEP struct {
	key string
	// ifaces are the interfaces it is for, sorted: the one it names,
	// ["*"], or those holding one of its expected IPs.
	ifaces []string
	// byAddr are its expected IPs when it is found by them (names no
	// interface): the kernel polices them wherever they are until felix
	// finds their interface (nftdp.HostByAddr).
	byAddr   []netip.Prefix
	ep       *endpoint
	in, out  []*cpolicy // every policy applying, in evaluation order
	profiles []string
	chains   [numHostCtx]string
	// shadowedBy maps each of ifaces that another endpoint of the same
	// node governs instead (hostsInOrder) to that endpoint's key.
	shadowedBy map[string]string
}

// wildcard reports whether the endpoint is for all interfaces ("*").
func (he *hostEP) wildcard() bool {
	return len(he.ifaces) == 1 && he.ifaces[0] == nftdp.WildcardIface
}

// ifacesOf is the interfaces a host endpoint is for (see hostEP.ifaces);
// none when it names none and none holds its IPs.
func ifacesOf(h HostEndpoint) []string {
	if h.Iface != "" {
		return []string{h.Iface}
	}
	var out []string
	for _, f := range h.Found {
		if f != "" && f != nftdp.WildcardIface {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// The contexts of a host endpoint's chains.
const (
	hostIn = iota
	hostOut
	hostFwdIn
	hostFwdOut
	hostPreDNAT
	hostRawIn
	hostRawOut
	numHostCtx
)

// SetFailsafe sets the failsafe ports (nil: Calico's defaults; empty:
// none).
func (c *Calc) SetFailsafe(in, out []HostPort) {
	c.hosts.failIn, c.hosts.failOut, c.hosts.failSet = slices.Clone(in), slices.Clone(out), true
	if in == nil {
		c.hosts.failIn = DefaultFailsafeInbound()
	}
	if out == nil {
		c.hosts.failOut = DefaultFailsafeOutbound()
	}
	c.pushHosts()
}

// SetTunnelPeers sets the addresses of the cluster's nodes, whose IPIP
// packets and UDP packets to udpPorts (their VXLAN and WireGuard ports)
// host endpoint policy lets through; it reports whether they changed.
func (c *Calc) SetTunnelPeers(addrs []netip.Addr, udpPorts []uint16) bool {
	var peers []netip.Prefix
	for _, a := range addrs {
		peers = append(peers, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	slices.SortFunc(peers, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	peers = slices.Compact(peers)
	ports := slices.Compact(slices.Sorted(slices.Values(udpPorts)))
	if slices.Equal(peers, c.hosts.peers) && slices.Equal(ports, c.hosts.tunnelPorts) {
		return false
	}
	c.hosts.peers, c.hosts.tunnelPorts = peers, ports
	c.pushHosts()
	return true
}

// SetHostEndpoint adds or replaces a host endpoint.
func (c *Calc) SetHostEndpoint(h HostEndpoint) {
	c.SetEndpoint(Endpoint{Key: h.Key, Node: h.Node, Labels: h.Labels, Profiles: h.Profiles, IPs: h.IPs, Ports: h.Ports, Host: true})
	he := c.hosts.eps[h.Key]
	ifaces := ifacesOf(h)
	var byAddr []netip.Prefix
	if h.Iface == "" {
		byAddr = slices.Clone(h.IPs)
	}
	if !h.Local || (len(ifaces) == 0 && len(byAddr) == 0) {
		if he != nil {
			c.removeHost(he)
		}
		return
	}
	if c.hosts.eps == nil {
		c.hosts.eps = map[string]*hostEP{}
	}
	if he == nil {
		he = &hostEP{key: c.eps[h.Key].key}
		c.hosts.eps[he.key] = he
	}
	he.ifaces, he.byAddr, he.ep = ifaces, byAddr, c.eps[h.Key]
	c.updateHost(he)
}

// DeleteHostEndpoint removes a host endpoint by key; a missing one is no
// change.
func (c *Calc) DeleteHostEndpoint(key string) {
	if he := c.hosts.eps[key]; he != nil {
		c.removeHost(he)
	}
	c.DeleteEndpoint(key)
}

// rehost re-renders the host endpoint key, if it is one of this node's.
func (c *Calc) rehost(key string) {
	if he := c.hosts.eps[key]; he != nil {
		he.ep = c.eps[key]
		c.updateHost(he)
	}
}

// rerender renders the chains of a group's local endpoints and host
// endpoints again (a profile they name came or went).
func (c *Calc) rerender(g *group) {
	for _, e := range g.eps {
		if l := c.locals[e.key]; l != nil {
			c.renderEndpoint(l)
		}
		if he := c.hosts.eps[e.key]; he != nil {
			c.renderHost(he)
		}
	}
}

// reselectHosts records which of this node's host endpoints a new
// version of a policy selects (before its chains are activated) and
// returns those whose policies change.
func (c *Calc) reselectHosts(old, np *cpolicy) []*hostEP {
	var out []*hostEP
	for _, k := range sortedKeys(c.hosts.eps) {
		he := c.hosts.eps[k]
		was := old != nil && old.selected[k]
		sel := np != nil && (np.hasIn || np.hasOut) && np.picks(he.ep.g)
		if sel {
			np.selected[k] = true
		}
		if was || sel {
			out = append(out, he)
		}
	}
	return out
}

// swapHostPolicy puts np in old's place in a host endpoint's lists (a
// rule edit: see replaceRules).
func (c *Calc) swapHostPolicy(key string, old, np *cpolicy) {
	he := c.hosts.eps[key]
	if he == nil {
		return
	}
	for _, ps := range [][]*cpolicy{he.in, he.out} {
		if i := slices.Index(ps, old); i >= 0 {
			ps[i] = np
		}
	}
}

// updateHost recomputes the policies and profiles of a host endpoint
// and renders its chains.
func (c *Calc) updateHost(he *hostEP) {
	g := he.ep.g
	oldPols := union(he.in, he.out)
	he.in, he.out = c.policiesFor(g)
	oldProfiles := he.profiles
	he.profiles = slices.Clone(g.profiles)
	c.reselect(he.key, oldPols, union(he.in, he.out), oldProfiles, he.profiles)
	c.renderHost(he)
}

// renderHost writes a host endpoint's chains and the host dispatch.
func (c *Calc) renderHost(he *hostEP) {
	for ctx := range numHostCtx {
		pols, sh, ok := c.hostShape(he, ctx)
		if !ok {
			c.unrefEPChain(he.chains[ctx])
			he.chains[ctx] = ""
			continue
		}
		name, rules, infos, runs := c.policyListChain(pols, ctx == hostIn || ctx == hostFwdIn || ctx == hostPreDNAT || ctx == hostRawIn, sh)
		c.swapEPChain(&he.chains[ctx], name, rules, infos, runs)
	}
	c.pushHosts()
}

// hostShape is the policies and shape of one context's chain; ok is
// false when the context has no chain (its traffic passes it).
func (c *Calc) hostShape(he *hostEP, ctx int) (pols []*cpolicy, sh chainShape, ok bool) {
	keep := func(ps []*cpolicy, f func(*cpolicy) bool) []*cpolicy {
		var out []*cpolicy
		for _, p := range ps {
			if f(p) {
				out = append(out, p)
			}
		}
		return out
	}
	normal := func(p *cpolicy) bool { return !p.host.only() }
	forward := func(p *cpolicy) bool { return !p.host.only() && p.host.applyOnForward }
	preDNAT := func(p *cpolicy) bool { return p.host.preDNAT }
	untracked := func(p *cpolicy) bool { return p.host.doNotTrack }
	named := !he.wildcard()
	switch ctx {
	case hostIn:
		return keep(he.in, normal), chainShape{prefix: "hep-in-", profiles: he.profiles, tierDrop: true, endDrop: true}, true
	case hostOut:
		return keep(he.out, normal), chainShape{prefix: "hep-eg-", profiles: he.profiles, tierDrop: true, endDrop: true}, true
	case hostFwdIn:
		pols, sh = keep(he.in, forward), chainShape{prefix: "hep-fi-", tierDrop: true, endDrop: true}
	case hostFwdOut:
		pols, sh = keep(he.out, forward), chainShape{prefix: "hep-fo-", tierDrop: true, endDrop: true}
	case hostPreDNAT:
		pols, sh = keep(he.in, preDNAT), chainShape{prefix: "hep-pd-"}
	case hostRawIn:
		pols, sh = keep(he.in, untracked), chainShape{prefix: "hep-ri-"}
	case hostRawOut:
		pols, sh = keep(he.out, untracked), chainShape{prefix: "hep-ro-"}
	}
	if (ctx == hostRawIn || ctx == hostRawOut) && !named {
		return nil, sh, false // Calico: "*" endpoints have no untracked policy
	}
	return pols, sh, len(pols) > 0
}

// removeHost drops a host endpoint's chains and selections.
func (c *Calc) removeHost(he *hostEP) {
	c.reselect(he.key, union(he.in, he.out), nil, he.profiles, nil)
	for i := range he.chains {
		c.unrefEPChain(he.chains[i])
	}
	delete(c.hosts.eps, he.key)
	c.pushHosts()
}

// HostSink is a Sink that can police host endpoints
// (*nftdp.Dataplane is one).
type HostSink interface {
	SetHostEndpoints(nftdp.HostEndpoints)
}

// pushHosts gives the sink the host dispatch: this node's host
// endpoints in key order, each on every interface it is for, only the
// first of two for one interface (the others are shadowed there:
// calc_hostep_warn.go), and points the rule index at them. An endpoint
// found on several interfaces by its IPs shares its chains between
// them. Each carries its rank in that order, so that the kernel tries
// an address-found endpoint's guard before the interfaces of endpoints
// it would win them from (nftdp.HostChains.Rank).
func (c *Calc) pushHosts() {
	hs, ok := c.sink.(HostSink)
	if !ok || (len(c.hosts.eps) == 0 && !c.hosts.touched) {
		return
	}
	order := c.hostsInOrder()
	c.indexHosts(order)
	c.hosts.touched = true
	if !c.hosts.failSet {
		c.hosts.failIn, c.hosts.failOut, c.hosts.failSet = DefaultFailsafeInbound(), DefaultFailsafeOutbound(), true
	}
	h := nftdp.HostEndpoints{FailsafeIn: c.hosts.failIn, FailsafeOut: c.hosts.failOut, TunnelPeers: c.hosts.peers, TunnelPorts: c.hosts.tunnelPorts}
	for rank, he := range order {
		ch := he.chains
		hc := nftdp.HostChains{In: ch[hostIn], Out: ch[hostOut],
			FwdIn: ch[hostFwdIn], FwdOut: ch[hostFwdOut], PreDNAT: ch[hostPreDNAT], RawIn: ch[hostRawIn], RawOut: ch[hostRawOut], Rank: rank}
		for _, iface := range he.ifaces {
			if he.shadowedBy[iface] == "" {
				hc.Iface = iface
				h.Endpoints = append(h.Endpoints, hc)
			}
		}
		if len(he.byAddr) > 0 {
			hc.Iface = ""
			h.ByAddr = append(h.ByAddr, nftdp.HostByAddr{Addrs: he.byAddr, Chains: hc})
		}
	}
	hs.SetHostEndpoints(h)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
