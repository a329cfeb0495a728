package felix

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// learnedRoute is a best path the BGP speaker learned.
type learnedRoute struct {
	nextHop netip.Addr
	// peer is the BGP neighbor it came from.
	peer netip.Addr
	// priority is its route priority (api.PriorityFromLocalPref): the
	// kernel metric it is programmed at (routeMetric).
	priority uint32
}

// Reasons a learned route is refused (the metric's label values).
const (
	FilterOwnBlock       = "own-block"
	FilterNotInIPAM      = "not-in-ipam"
	FilterWrongNextHop   = "wrong-next-hop"
	FilterClusterOutside = "cluster-peer-outside-pools"
	// FilterWorkloadInPool is a route inside a pool from a peer whose
	// own address is inside a pool: a pod (BGPPeer
	// localWorkloadSelector).
	FilterWorkloadInPool = "workload-peer-inside-pools"
	// FilterReachableBy is a peer's own address, routed through its
	// BGPPeer's reachableBy gateway instead (not a refusal of the guard:
	// that route wins, as BIRD's static route does in Calico).
	FilterReachableBy = "reachable-by"
)

// rejection is why a learned route stays out of the kernel.
type rejection struct {
	kind, detail string
}

func (r rejection) String() string { return r.kind + ": " + r.detail }

// guard is the import guard. BGP is told what to route by peers, but
// only the datastore says which node holds which addresses, so pool
// space is routed as IPAM says and never as a peer claims:
//
//   - a route equal to or inside a block affine to this node is refused
//     (it would beat the node's blackhole or pod routes), except a /32
//     IPAM lent to another node, announced by that node;
//   - a route inside a pool is accepted only when it is a block confirmed
//     for the node at its next hop, or a borrowed /32 allocated to that
//     node (an explicit peer such as a ToR may re-announce either with
//     itself as next hop);
//   - a route outside every pool is refused when it comes from another
//     routed node (mesh or route-reflector sessions carry pool routes
//     only), and accepted from an explicit peer such as a ToR (its
//     default route, datacenter ranges), as Calico does;
//   - a route inside a pool is refused from a peer whose own address is
//     inside a pool (a pod peering through a BGPPeer's
//     localWorkloadSelector), whatever its next hop: a pod must never
//     pull another pod's address, or a block, to itself. Outside the
//     pools it is accepted as from any explicit peer (BGPFilters narrow
//     it, as in Calico).
type guard struct {
	pools []*pool
	self  string
	// owner maps each confirmed block to its node; own lists this node's
	// blocks in any state.
	owner map[netip.Prefix]string
	own   []netip.Prefix
	// nodeAt maps node addresses (IPv4 and IPv6) to node names; addrOf
	// and addrOf6 map node names to their addresses.
	nodeAt          map[netip.Addr]string
	addrOf, addrOf6 map[string]netip.Addr
	// borrowed maps borrowed /32s to the node that holds them.
	borrowed map[netip.Addr]string
}

func newGuard(cfg *Config, s *state, pools []*pool) *guard {
	g := &guard{pools: pools, self: cfg.NodeName, owner: map[netip.Prefix]string{},
		nodeAt: map[netip.Addr]string{}, addrOf: map[string]netip.Addr{}, addrOf6: map[string]netip.Addr{},
		borrowed: map[netip.Addr]string{}}
	for _, a := range s.affinities {
		switch {
		case a.Node == cfg.NodeName:
			g.own = append(g.own, a.CIDR.Masked())
		case a.State == AffinityConfirmed:
			g.owner[a.CIDR.Masked()] = a.Node
		}
	}
	for name := range s.nodes {
		if p, ok := s.nodeAddr(name); ok {
			g.nodeAt[p.Addr()] = name
			g.addrOf[name] = p.Addr()
		}
		if p, ok := s.nodeAddr6(name); ok {
			g.nodeAt[p.Addr()] = name
			g.addrOf6[name] = p.Addr()
		}
	}
	for _, br := range s.borrowed {
		for a, n := range br {
			g.borrowed[a] = n
		}
	}
	return g
}

// check returns nil when the learned route dst may be programmed.
func (g *guard) check(dst netip.Prefix, r learnedRoute) *rejection {
	if from := g.poolOf(r.peer); from != nil {
		if in := g.poolHolding(dst); in != nil {
			return &rejection{FilterWorkloadInPool, fmt.Sprintf("inside pool %s, from workload peer %s (an address of pool %s): only IPAM says who holds pool addresses", in.name, r.peer, from.name)}
		}
		// A route covering a pool (a pod's default route) is accepted:
		// every address held in the pool has a longer route from IPAM.
	}
	for _, b := range g.own {
		if b.Bits() > dst.Bits() || !b.Contains(dst.Addr()) {
			continue
		}
		// The one route allowed inside our own block: an address IPAM
		// lent to another node, announced by that node.
		if holder := g.borrowed[dst.Addr()]; dst.IsSingleIP() && holder != "" && holder != g.self {
			return g.nextHopFor(holder, "borrowed address", dst, r)
		}
		return &rejection{FilterOwnBlock, fmt.Sprintf("inside %s, a block of this node", b)}
	}
	in := g.poolHolding(dst)
	if in == nil {
		if from, ok := g.nodeAt[r.peer]; ok {
			return &rejection{FilterClusterOutside, fmt.Sprintf("outside every IP pool, from node %s (cluster sessions carry pool routes only)", from)}
		}
		return nil
	}
	holder, what := g.owner[dst], "block"
	if holder == "" && dst.IsSingleIP() {
		holder, what = g.borrowed[dst.Addr()], "borrowed address"
	}
	if holder == "" {
		return &rejection{FilterNotInIPAM, fmt.Sprintf("inside pool %s but neither a confirmed block nor a borrowed address in IPAM", in.name)}
	}
	return g.nextHopFor(holder, what, dst, r)
}

// poolOf is the pool holding a (nil: none).
func (g *guard) poolOf(a netip.Addr) *pool {
	for _, p := range g.pools {
		if a.IsValid() && p.cidr.Contains(a) {
			return p
		}
	}
	return nil
}

// poolHolding is the pool that holds all of dst (nil: none).
func (g *guard) poolHolding(dst netip.Prefix) *pool {
	for _, p := range g.pools {
		if p.cidr.Bits() <= dst.Bits() && p.cidr.Contains(dst.Addr()) {
			return p
		}
	}
	return nil
}

// nextHopFor accepts a pool route of holder's when it leads to holder. A
// routed node must announce it with holder's own address as next hop (a
// node cannot pull another node's traffic); an explicit peer such as a
// ToR may re-announce it with itself as next hop (AS-per-rack designs).
// The holder's address is the one of dst's family: an IPv6 block must
// come with the node's IPv6 address as next hop.
func (g *guard) nextHopFor(holder, what string, dst netip.Prefix, r learnedRoute) *rejection {
	addrs := g.addrOf
	if dst.Addr().Is6() {
		addrs = g.addrOf6
	}
	want, ok := addrs[holder]
	if ok && want == r.nextHop {
		return nil
	}
	if _, fromNode := g.nodeAt[r.peer]; !fromNode && r.peer.IsValid() {
		return nil
	}
	return &rejection{FilterWrongNextHop, fmt.Sprintf("%s of node %s, announced with next hop %s (node's address %s)", what, holder, r.nextHop, addrText(want))}
}

func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	return a.String()
}

// filterState publishes the current rejections for status and metrics.
type filterState struct {
	current atomic.Pointer[map[netip.Prefix]string]
	gauge   *prometheus.GaugeVec
}

func newFilterState() *filterState {
	return &filterState{gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "routed_felix_learned_routes_filtered",
		Help: "BGP-learned routes the import guard keeps out of the kernel, by reason.",
	}, []string{"reason"})}
}

// set publishes the rejections of the latest plan.
func (fs *filterState) set(rej map[netip.Prefix]*rejection) {
	m := make(map[netip.Prefix]string, len(rej))
	counts := map[string]int{FilterOwnBlock: 0, FilterNotInIPAM: 0, FilterWrongNextHop: 0, FilterClusterOutside: 0, FilterReachableBy: 0, FilterWorkloadInPool: 0}
	for p, r := range rej {
		m[p] = r.String()
		counts[r.kind]++
	}
	fs.current.Store(&m)
	for k, n := range counts {
		fs.gauge.WithLabelValues(k).Set(float64(n))
	}
}

// Filtered returns why felix keeps the learned route prefix out of the
// kernel, or "" when it does not. Safe for concurrent use.
func (f *Felix) Filtered(prefix netip.Prefix) string {
	m := f.filters.current.Load()
	if m == nil {
		return ""
	}
	return (*m)[prefix.Masked()]
}
