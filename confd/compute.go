package confd

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/selector"
	"github.com/routed-net/routed/routed/bgp"
)

// Input is everything the peer computation looks at.
type Input struct {
	// NodeName is the local node.
	NodeName string
	Nodes    []*api.Node
	Configs  []*api.BGPConfiguration
	Peers    []*api.BGPPeer
	Filters  map[string]*api.BGPFilter
	Pools    []*api.IPPool
	// Workloads are this node's WorkloadEndpoints (others are ignored)
	// and Profiles the profiles whose labels they inherit: the pods a
	// BGPPeer's localWorkloadSelector may match (compute_workload.go).
	Workloads []*api.WorkloadEndpoint
	Profiles  map[string]*api.Profile
}

// PeerSpec is one wanted session before its password is read.
type PeerSpec struct {
	bgp.Peer
	// PasswordSource says where the MD5 password comes from; nil for none.
	PasswordSource *api.PasswordSource
	// Filters are the session's BGPFilter rules; nil for none.
	Filters *bgp.PeerFilters
	// ReachableBy is the gateway the peer's address is routed through
	// (BGPPeer reachableBy); invalid for none.
	ReachableBy netip.Addr
}

// Desired is what the local speaker should do.
type Desired struct {
	// Global is valid only when Problem is empty.
	Global bgp.Global
	// Problem says why BGP cannot run on this node yet (no Node resource,
	// neither an IPv4 nor an IPv6 address).
	Problem      string
	Peers        []PeerSpec
	ServiceCIDRs []netip.Prefix
	// Communities to attach to originated routes, by prefix.
	Communities []bgp.PrefixCommunities
	// Filters are the BGPFilter rules per session.
	Filters map[netip.Addr]bgp.PeerFilters
	// NoExportCIDRs are the CIDRs of pools with disableBGPExport (disabled
	// pools included: their existing blocks stay private), sorted.
	NoExportCIDRs []netip.Prefix
	// PeerRoutes are the routes to peers with reachableBy: peer address
	// to gateway (compute_peerroute.go).
	PeerRoutes map[netip.Addr]netip.Addr
	// WorkloadPeering are, per pod interface, the addresses felix puts
	// on its host side for the pod's sessions with this node
	// (localWorkloadPeeringIPV4/IPV6; compute_workload.go).
	WorkloadPeering map[string][]netip.Addr
	// Warnings are resources that were skipped, and why.
	Warnings []string
}

// Candidate priorities when several resources ask for a session with the
// same address: explicit configuration beats the mesh, a peering between
// routed nodes through a peerSelector beats an address given by hand.
const (
	prioMesh = iota
	prioGlobal
	prioNodeSpecific
	prioSelector
)

type candidate struct {
	PeerSpec
	prio int
}

// Compute derives the local node's BGP identity and sessions. It is a
// pure function of its input.
//
//   - AS number: the Node's, else BGPConfiguration "node.<name>", else
//     "default", else 64512. The same rule gives every peer node's AS.
//   - Node-to-node mesh with every other node that has an IPv4 address,
//     unless "default" sets nodeToNodeMeshEnabled: false; and, between
//     nodes that both have an IPv6 address, a second session over IPv6
//     carrying IPv6 routes (as Calico's separate BIRD for IPv6). Selector
//     peerings (route reflectors) do the same per family.
//   - Router ID: the node's IPv4 address; a node with only an IPv6
//     address gets one derived from its name (routerIDFromName).
//   - BGPPeers apply to a node named by spec.node, or selected by
//     spec.nodeSelector, or to every node when both are empty. With
//     peerIP they peer with that address (node specific or global; an
//     IPv6 peerIP from the node's IPv6 address, on nodes that have one); with
//     peerSelector they peer with the selected routed nodes, in both
//     directions unless reversePeering is Manual.
//   - Route reflectors: a node with routeReflectorClusterID treats a
//     selector peer as its RR client unless the peer is an RR of the same
//     cluster (those peer as plain iBGP non-clients).
func Compute(in Input) Desired {
	var d Desired
	nodes := map[string]*api.Node{}
	for _, n := range in.Nodes {
		nodes[n.Metadata.Name] = n
	}
	cfgs := map[string]*api.BGPConfiguration{}
	for _, c := range in.Configs {
		cfgs[c.Metadata.Name] = c
	}
	def, local := cfgs["default"], cfgs["node."+in.NodeName]

	me := nodes[in.NodeName]
	if me == nil {
		d.Problem = fmt.Sprintf("no Node resource named %q", in.NodeName)
		return d
	}
	myAddr, has4 := nodeAddr(me)
	myAddr6, has6 := nodeAddr6(me)
	if !has4 && !has6 {
		d.Problem = fmt.Sprintf("Node %q has neither a valid spec.bgp.ipv4Address nor a valid spec.bgp.ipv6Address", in.NodeName)
		return d
	}
	routerID := myAddr
	if !has4 {
		routerID = routerIDFromName(in.NodeName)
	}
	// mine is this node's address of a's family (invalid if it has none).
	mine := func(a netip.Addr) netip.Addr {
		if a.Is6() {
			return myAddr6
		}
		return myAddr
	}
	d.Global = bgp.Global{
		ASN:             uint32(nodeASN(me, cfgs)),
		RouterID:        routerID,
		RouterIDDerived: !has4,
		IPv6:            myAddr6,
		ListenPort:      listenPort(in.NodeName, cfgs),
		LogSeverity:     firstNonEmpty(str(local, logSeverity), str(def, logSeverity)),
		BindRouterID: firstNonEmpty(str(local, func(c *api.BGPConfiguration) string { return c.Spec.BindMode }),
			str(def, func(c *api.BGPConfiguration) string { return c.Spec.BindMode })) == "NodeIP",
	}
	d.ServiceCIDRs, d.Warnings = serviceCIDRs(local, def)
	d.Communities = prefixCommunities(local, def)
	d.NoExportCIDRs = noExportCIDRs(in.Pools)
	ka, hold := timers(local, def)

	var cands []candidate
	// nodePeers are the sessions with another routed node: one per
	// family both nodes have an address of.
	nodePeers := func(n *api.Node, prio int, typ, name string) []candidate {
		if n.Metadata.Name == in.NodeName {
			return nil
		}
		var out []candidate
		for _, addrOf := range []func(*api.Node) (netip.Addr, bool){nodeAddr, nodeAddr6} {
			a, ok := addrOf(n)
			local := mine(a)
			if !ok || !local.IsValid() || a == local {
				continue
			}
			out = append(out, candidate{prio: prio, PeerSpec: PeerSpec{Peer: bgp.Peer{
				Address: a, Port: listenPort(n.Metadata.Name, cfgs), ASN: uint32(nodeASN(n, cfgs)),
				Type: typ, Name: name, LocalAddress: local, KeepaliveTime: ka, HoldTime: hold,
				// One side dials, chosen as Calico's BIRD template chooses it
				// (`gt` on the two addresses as strings: the lower waits),
				// so a routed node and a calico-node's BIRD still form the
				// session in a cluster switching node by node. The waiting
				// side still dials once, at once, when the peer is added
				// (bgp.Peer.Passive): a BIRD that must dial waits its
				// connect delay first, and lost the node's routes meanwhile.
				Passive: a.String() > local.String(),
			}}})
		}
		return out
	}

	if def == nil || def.MeshEnabled() {
		for _, n := range sortedNodes(nodes) {
			for _, c := range nodePeers(n, prioMesh, bgp.PeerTypeMesh, n.Metadata.Name) {
				if def != nil {
					if pw := def.Spec.NodeMeshPassword; pw != nil {
						cp := *pw
						c.PasswordSource = &cp
					}
					c.RestartTime = firstDuration(def.Spec.NodeMeshMaxRestartTime)
				}
				cands = append(cands, c)
			}
		}
	}

	bps := slices.Clone(in.Peers)
	slices.SortFunc(bps, func(a, b *api.BGPPeer) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	picked, warn := workloadPeers(in, me, bps)
	d.Warnings = append(d.Warnings, warn...)
	for _, bp := range bps {
		s := bp.Spec
		appliesTo, err := peerAppliesTo(bp)
		if err != nil {
			d.Warnings = append(d.Warnings, err.Error())
			continue
		}
		typ, prio := bgp.PeerTypeGlobal, prioGlobal
		if s.Node != "" {
			typ, prio = bgp.PeerTypeNodeSpecific, prioNodeSpecific
		}
		bka, bhold := peerTimers(bp, ka, hold)
		finish := func(c candidate) candidate {
			v6 := c.Address.Is6()
			c.KeepaliveTime, c.HoldTime = bka, bhold
			switch s.NextHopMode {
			case "":
				c.KeepOriginalNextHop = s.KeepOriginalNextHop
			case api.NextHopKeep:
				c.KeepOriginalNextHop = true
			case api.NextHopSelf:
				c.NextHopSelf = true
			}
			if s.SourceAddress == api.SourceNone {
				c.LocalAddress = netip.Addr{}
			}
			if s.Password != nil {
				pw := *s.Password
				c.PasswordSource = &pw
			}
			c.RestartTime = firstDuration(s.MaxRestartTime)
			c.AllowOwnAS = uint32(max(s.NumAllowedLocalASNumbers, 0))
			c.TTLHops = s.TTLSecurity
			c.LocalASN = uint32(s.LocalASNumber)
			c.ReachableBy = reachableBy(s, c.Address)
			if len(s.Filters) > 0 {
				localAS := cmp.Or(c.LocalASN, d.Global.ASN)
				pf, err := peerFilters(s.Filters, in.Filters, v6, c.ASN != localAS, localAS)
				if err != nil {
					// Down rather than unfiltered: it would accept
					// routes the missing filter rejects.
					c.ConfigError = fmt.Sprintf("BGPPeer %q: %v", bp.Metadata.Name, err)
				}
				c.Filters = &pf
			}
			return c
		}

		if s.LocalWorkloadSelector != "" {
			for _, c := range workloadCandidates(in, bp, picked, prio) {
				cands = append(cands, finish(c))
			}
			continue
		}
		if s.PeerIP != "" {
			a, port, err := s.PeerAddrPort()
			if err != nil || !a.IsValid() || a.Zone() != "" {
				d.Warnings = append(d.Warnings, fmt.Sprintf("BGPPeer %q: peerIP %q is not an IPv4 or IPv6 address", bp.Metadata.Name, s.PeerIP))
				continue
			}
			a = a.Unmap()
			if a.IsMulticast() {
				// Calico accepts one (its test data has some); BIRD
				// would keep the session in Connect forever.
				d.Warnings = append(d.Warnings, fmt.Sprintf("BGPPeer %q: peerIP %s is a multicast address: no TCP session can reach it, none is configured", bp.Metadata.Name, a))
				continue
			}
			if target := nodeAt(nodes, a); target != nil && (s.ASNumber == 0 || s.ASNumber == nodeASN(target, cfgs)) {
				// As Calico: a peerIP that is a node's address (and
				// AS) peers with that node like a peerSelector choosing
				// it, over that address's family only, and that node
				// peers back unless reversePeering is Manual.
				for _, n := range byIPPeers(nodes, me, target, appliesTo, s.ReversePeering != api.ReversePeeringManual) {
					for _, c := range nodePeers(n, prioSelector, typ, n.Metadata.Name) {
						if c.Address.Is6() == a.Is6() {
							cands = append(cands, finish(markRR(c, me, n)))
						}
					}
				}
				continue
			}
			if s.ASNumber == 0 {
				d.Warnings = append(d.Warnings, fmt.Sprintf("BGPPeer %q: peerIP %s has no asNumber and is no node's address: no session", bp.Metadata.Name, a))
				continue
			}
			if !appliesTo(me) || a == myAddr || a == myAddr6 {
				continue
			}
			local := mine(a)
			if !local.IsValid() {
				// As Calico: IPv6 sessions run from the node's IPv6
				// address (and IPv4 ones from its IPv4 address).
				d.Warnings = append(d.Warnings, fmt.Sprintf("BGPPeer %q: peerIP %s needs an %s on node %q (spec.bgp.%s): no session",
					bp.Metadata.Name, a, familyName(a), in.NodeName, addressField(a)))
				continue
			}
			cands = append(cands, finish(candidate{prio: prio, PeerSpec: PeerSpec{Peer: bgp.Peer{
				Address: a, Port: port, ASN: uint32(s.ASNumber), Type: typ, Name: bp.Metadata.Name, LocalAddress: local,
			}}}))
			continue
		}

		sel, err := selector.Parse(s.PeerSelector)
		if err != nil {
			d.Warnings = append(d.Warnings, fmt.Sprintf("BGPPeer %q: peerSelector: %v", bp.Metadata.Name, err))
			continue
		}
		// A selector peering exists between n and m when the BGPPeer
		// applies to one and selects the other, whichever is local.
		for _, n := range sortedNodes(nodes) {
			if n.Metadata.Name == in.NodeName {
				continue
			}
			forward := appliesTo(me) && sel.Evaluate(n.Metadata.Labels)
			reverse := s.ReversePeering != api.ReversePeeringManual && appliesTo(n) && sel.Evaluate(me.Metadata.Labels)
			if !forward && !reverse {
				continue
			}
			for _, c := range nodePeers(n, prioSelector, typ, n.Metadata.Name) {
				cands = append(cands, finish(markRR(c, me, n)))
			}
		}
	}

	d.Peers = merge(cands)
	d.WorkloadPeering, warn = workloadPeeringAddrs(in, def, picked)
	d.Warnings = append(d.Warnings, warn...)
	d.PeerRoutes = peerRoutes(d.Peers)
	for _, p := range d.Peers {
		if p.Filters != nil {
			if d.Filters == nil {
				d.Filters = map[netip.Addr]bgp.PeerFilters{}
			}
			d.Filters[p.Address] = *p.Filters
		}
	}
	return d
}

// peerFilters flattens the named BGPFilters' IPv4 rules (IPv6 rules for
// an IPv6 session), in order, leaving out the rules whose peerType is
// not this session's (eBGP when ebgp, else iBGP). localAS is the AS this
// node presents on the session.
func peerFilters(names []string, all map[string]*api.BGPFilter, v6, ebgp bool, localAS uint32) (bgp.PeerFilters, error) {
	var pf bgp.PeerFilters
	kind := api.FilterPeerIBGP
	if ebgp {
		kind = api.FilterPeerEBGP
	}
	conv := func(rules []api.BGPFilterRule, export bool) []bgp.FilterRule {
		var out []bgp.FilterRule
		for _, r := range rules {
			if r.PeerType != "" && r.PeerType != kind {
				continue
			}
			fr, err := filterRule(r, export)
			if err != nil {
				continue // refused by validation
			}
			if export && ebgp {
				fr.EBGPLocalAS = localAS
			}
			out = append(out, fr)
		}
		return out
	}
	for _, n := range names {
		f := all[n]
		if f == nil {
			return pf, fmt.Errorf("BGPFilter %q does not exist: session kept down", n)
		}
		if v6 {
			pf.Import = append(pf.Import, conv(f.Spec.ImportV6, false)...)
			pf.Export = append(pf.Export, conv(f.Spec.ExportV6, true)...)
			continue
		}
		pf.Import = append(pf.Import, conv(f.Spec.ImportV4, false)...)
		pf.Export = append(pf.Export, conv(f.Spec.ExportV4, true)...)
	}
	return pf, nil
}

// filterRule converts a validated BGPFilter rule. Source RemotePeers
// only narrows export rules: every imported route comes from a peer.
func filterRule(r api.BGPFilterRule, export bool) (bgp.FilterRule, error) {
	// An interface rule matches learned routes only (BIRD's originated
	// routes have no interface): on export, that is RemoteOnly.
	fr := bgp.FilterRule{Accept: r.Action == api.FilterAccept, Op: r.MatchOperator, Interface: r.Interface,
		RemoteOnly: export && (r.Source == api.FilterSourceRemotePeer || r.Interface != "")}
	if r.CIDR != "" {
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil {
			return fr, err
		}
		fr.CIDR = p.Masked()
		if pl := r.PrefixLength; pl != nil {
			fr.MinLen, fr.MaxLen = uint8(p.Bits()), uint8(p.Addr().BitLen())
			if pl.Min != nil {
				fr.MinLen = uint8(max(*pl.Min, int32(p.Bits())))
			}
			if pl.Max != nil {
				fr.MaxLen = uint8(min(*pl.Max, int32(p.Addr().BitLen())))
			}
		}
	}
	if r.Communities != nil && len(r.Communities.Values) > 0 {
		fr.Community = r.Communities.Values[0]
	}
	for _, a := range r.ASPathPrefix {
		fr.ASPathPrefix = append(fr.ASPathPrefix, uint32(a))
	}
	if r.Priority != nil {
		fr.Priority = *r.Priority
	}
	for _, op := range r.Operations {
		if op.SetPriority != nil {
			fr.SetPriority = op.SetPriority.Value // the last one wins, as in BIRD
		}
		if op.AddCommunity != nil {
			fr.AddCommunities = append(fr.AddCommunities, op.AddCommunity.Value)
		}
		if op.PrependASPath != nil {
			// Each prepend goes in front of what the earlier ones made.
			var p []uint32
			for _, a := range op.PrependASPath.Prefix {
				p = append(p, uint32(a))
			}
			fr.Prepend = append(p, fr.Prepend...)
		}
	}
	return fr, nil
}

// merge keeps one candidate per address: the highest priority, and among
// equals the first (BGPPeers are visited by name).
func merge(cands []candidate) []PeerSpec {
	best := map[netip.Addr]candidate{}
	for _, c := range cands {
		if old, ok := best[c.Address]; !ok || c.prio > old.prio {
			best[c.Address] = c
		}
	}
	out := make([]PeerSpec, 0, len(best))
	for _, c := range best {
		out = append(out, c.PeerSpec)
	}
	slices.SortFunc(out, func(a, b PeerSpec) int { return a.Address.Compare(b.Address) })
	return out
}

// peerAppliesTo returns which nodes a BGPPeer configures sessions on.
func peerAppliesTo(bp *api.BGPPeer) (func(*api.Node) bool, error) {
	s := bp.Spec
	switch {
	case s.Node != "":
		return func(n *api.Node) bool { return n.Metadata.Name == s.Node }, nil
	case s.NodeSelector != "":
		sel, err := selector.Parse(s.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("BGPPeer %q: nodeSelector: %w", bp.Metadata.Name, err)
		}
		return func(n *api.Node) bool { return sel.Evaluate(n.Metadata.Labels) }, nil
	}
	return func(*api.Node) bool { return true }, nil
}

func nodeAddr(n *api.Node) (netip.Addr, bool) {
	p, ok := n.Address()
	if !ok || !p.Addr().Is4() {
		return netip.Addr{}, false
	}
	return p.Addr(), true
}

func nodeAddr6(n *api.Node) (netip.Addr, bool) {
	p, ok := n.Address6()
	if !ok {
		return netip.Addr{}, false
	}
	return p.Addr(), true
}

func familyName(a netip.Addr) string {
	if a.Is6() {
		return "IPv6 address"
	}
	return "IPv4 address"
}

func addressField(a netip.Addr) string {
	if a.Is6() {
		return "ipv6Address"
	}
	return "ipv4Address"
}

// routerIDFromName derives a BGP router ID for a node without an IPv4
// address from its name (as Calico's CALICO_ROUTER_ID=hash): stable
// across restarts, and distinct between nodes unless two names collide
// in 32 bits. It avoids 0.0.0.0, which BGP forbids.
func routerIDFromName(name string) netip.Addr {
	h := sha256.Sum256([]byte(name))
	id := [4]byte(h[:4])
	if id == [4]byte{} {
		id[3] = 1
	}
	return netip.AddrFrom4(id)
}

func clusterID(n *api.Node) string {
	if n.Spec.BGP == nil {
		return ""
	}
	return n.Spec.BGP.RouteReflectorClusterID
}

// nodeASN applies the AS number precedence to node n.
func nodeASN(n *api.Node, cfgs map[string]*api.BGPConfiguration) api.ASNumber {
	if n.Spec.BGP != nil && n.Spec.BGP.ASNumber != 0 {
		return n.Spec.BGP.ASNumber
	}
	if c := cfgs["node."+n.Metadata.Name]; c != nil && c.Spec.ASNumber != 0 {
		return c.Spec.ASNumber
	}
	if c := cfgs["default"]; c != nil && c.Spec.ASNumber != 0 {
		return c.Spec.ASNumber
	}
	return api.DefaultASNumber
}

func listenPort(node string, cfgs map[string]*api.BGPConfiguration) uint16 {
	if c := cfgs["node."+node]; c != nil && c.Spec.ListenPort != 0 {
		return c.Spec.ListenPort
	}
	if c := cfgs["default"]; c != nil && c.Spec.ListenPort != 0 {
		return c.Spec.ListenPort
	}
	return bgp.DefaultPort
}

func logSeverity(c *api.BGPConfiguration) string { return c.Spec.LogSeverity }

func str(c *api.BGPConfiguration, f func(*api.BGPConfiguration) string) string {
	if c == nil {
		return ""
	}
	return f(c)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// timers are the keepalive and hold times from the node's then the
// default BGPConfiguration; zero leaves GoBGP's defaults.
func timers(local, def *api.BGPConfiguration) (ka, hold time.Duration) {
	ka = firstDuration(str(local, func(c *api.BGPConfiguration) string { return c.Spec.KeepaliveTime }),
		str(def, func(c *api.BGPConfiguration) string { return c.Spec.KeepaliveTime }))
	hold = firstDuration(str(local, func(c *api.BGPConfiguration) string { return c.Spec.HoldTime }),
		str(def, func(c *api.BGPConfiguration) string { return c.Spec.HoldTime }))
	return ka, hold
}

func peerTimers(bp *api.BGPPeer, ka, hold time.Duration) (time.Duration, time.Duration) {
	if d := firstDuration(bp.Spec.KeepaliveTime); d != 0 {
		ka = d
	}
	if d := firstDuration(bp.Spec.HoldTime); d != 0 {
		hold = d
	}
	return ka, hold
}

func firstDuration(s ...string) time.Duration {
	for _, v := range s {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 0
}

// serviceCIDRs are advertised from every node: the node's own
// BGPConfiguration's list if it has one, else the default's.
func serviceCIDRs(local, def *api.BGPConfiguration) ([]netip.Prefix, []string) {
	var out []netip.Prefix
	var warn []string
	// Each list comes from the node's own BGPConfiguration when it sets
	// it, else from "default".
	lists := []struct {
		name string
		get  func(*api.BGPConfiguration) []api.ServiceClusterIP
	}{
		{"serviceClusterIPs", func(c *api.BGPConfiguration) []api.ServiceClusterIP { return c.Spec.ServiceClusterIPs }},
		{"serviceExternalIPs", func(c *api.BGPConfiguration) []api.ServiceClusterIP { return c.Spec.ServiceExternalIPs }},
		{"serviceLoadBalancerIPs", func(c *api.BGPConfiguration) []api.ServiceClusterIP { return c.Spec.ServiceLoadBalancerIPs }},
	}
	for _, l := range lists {
		src := def
		if local != nil && len(l.get(local)) > 0 {
			src = local
		}
		if src == nil {
			continue
		}
		for _, s := range l.get(src) {
			if s.CIDR == "" {
				continue // an empty entry, skipped as Calico does
			}
			p, err := netip.ParsePrefix(s.CIDR)
			if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				warn = append(warn, fmt.Sprintf("BGPConfiguration %q: %s %q is not an IPv4 or IPv6 CIDR", src.Metadata.Name, l.name, s.CIDR))
				continue
			}
			if !slices.Contains(out, p.Masked()) {
				out = append(out, p.Masked())
			}
		}
	}
	return out, warn
}

// prefixCommunities is the node's BGPConfiguration's prefixAdvertisements
// when it has any, else "default"'s, with community names resolved.
func prefixCommunities(local, def *api.BGPConfiguration) []bgp.PrefixCommunities {
	src := def
	if local != nil && len(local.Spec.PrefixAdvertisements) > 0 {
		src = local
	}
	if src == nil {
		return nil
	}
	var out []bgp.PrefixCommunities
	for _, pa := range src.Spec.PrefixAdvertisements {
		p, err := netip.ParsePrefix(pa.CIDR)
		if err != nil {
			continue // refused by validation
		}
		out = append(out, bgp.PrefixCommunities{CIDR: p.Masked(), Communities: src.CommunityValues(pa.Communities)})
	}
	return out
}

func sortedNodes(m map[string]*api.Node) []*api.Node {
	out := make([]*api.Node, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *api.Node) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	return out
}

// noExportCIDRs are the sorted CIDRs of the pools with disableBGPExport.
func noExportCIDRs(pools []*api.IPPool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range pools {
		if !p.Spec.DisableBGPExport {
			continue
		}
		if c, err := netip.ParsePrefix(p.Spec.CIDR); err == nil {
			out = append(out, c.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if x := a.Addr().Compare(b.Addr()); x != 0 {
			return x
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}
