package felix

import (
	"net/netip"
	"sort"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// Affinity states (pkg/ipam's vocabulary). Only confirmed blocks are routed.
const (
	AffinityPending         = "pending"
	AffinityConfirmed       = "confirmed"
	AffinityPendingDeletion = "pendingDeletion"
)

// BlockAffinity says a node holds an IPAM block (pkg/ipam's Affinity,
// as plain data so the core does not depend on pkg/ipam).
type BlockAffinity struct {
	Node  string
	CIDR  netip.Prefix
	State string
}

type affKey struct {
	node string
	cidr netip.Prefix
}

type pool struct {
	name   string
	cidr   netip.Prefix
	ipip   string
	vxlan  string
	nat    bool
	nodes  kernel.PoolNodeSelector // zero: selects no node (unparseable)
	exists bool
}

// state is everything felix has been told. Owned by the Run goroutine.
type state struct {
	pools map[string]*pool
	// nodes are every node as felix needs it: this node's whole, the
	// others' addresses and VXLAN tunnel fields only (see routeNode).
	nodes      map[string]*api.Node
	weps       map[string]*api.WorkloadEndpoint // this node's only
	affinities map[affKey]BlockAffinity
	learned    map[netip.Prefix]learnedRoute
	// peerRoutes are the routes to BGP peers with reachableBy: peer
	// address to gateway (confd).
	peerRoutes map[netip.Addr]netip.Addr
	// peering are the workload peering addresses per pod interface
	// (confd; wlpeer.go).
	peering map[string][]netip.Addr
	// peeringRetired says since when each address confd no longer wants
	// has been unwanted (wlpeer.go: PeeringRetireGrace).
	peeringRetired map[ifaceAddr]time.Time
	// borrowed holds, per block, the addresses allocated to nodes other
	// than the block's (pkg/ipam's borrowed /32s) and their node.
	borrowed map[netip.Prefix]map[netip.Addr]string
	// gateway resolves a next hop that is not on a local subnet to the
	// gateway the kernel uses for it (zero: directly reachable/unknown).
	gateway func(netip.Addr) netip.Addr
	// wg is what the WireGuard devices tell the plan (wireguard.go).
	wg wgInputs
}

func newState() *state {
	return &state{
		pools: map[string]*pool{}, nodes: map[string]*api.Node{},
		weps: map[string]*api.WorkloadEndpoint{}, affinities: map[affKey]BlockAffinity{},
		learned: map[netip.Prefix]learnedRoute{}, borrowed: map[netip.Prefix]map[netip.Addr]string{},
		peeringRetired: map[ifaceAddr]time.Time{},
	}
}

// setResource records a created or updated resource and reports whether
// it changes anything felix uses: kinds felix does not use, and other
// nodes' endpoints (the feed carries every node's), change nothing.
func (s *state) setResource(node string, r api.Resource) bool {
	switch v := r.(type) {
	case *api.IPPool:
		s.pools[v.Metadata.Name] = newPool(v)
	case *api.Node:
		s.nodes[v.Metadata.Name] = routeNode(v, v.Metadata.Name == node)
	case *api.WorkloadEndpoint:
		if v.Spec.Node == node {
			s.weps[v.Metadata.Name] = v
		} else if _, had := s.weps[v.Metadata.Name]; had {
			delete(s.weps, v.Metadata.Name) // moved away (not expected)
		} else {
			return false
		}
	default:
		return false
	}
	return true
}

// deleteResource records a deletion and reports whether felix used it.
func (s *state) deleteResource(k api.Kind, name string) bool {
	switch k {
	case api.KindIPPool:
		delete(s.pools, name)
	case api.KindNode:
		delete(s.nodes, name)
	case api.KindWorkloadEndpoint:
		if _, had := s.weps[name]; !had {
			return false
		}
		delete(s.weps, name)
	default:
		return false
	}
	return true
}

// replaceResources replaces everything of the kinds present in rs.
func (s *state) replaceResources(node string, rs map[api.Kind][]api.Resource) {
	for k, list := range rs {
		switch k {
		case api.KindIPPool:
			s.pools = map[string]*pool{}
		case api.KindNode:
			s.nodes = map[string]*api.Node{}
		case api.KindWorkloadEndpoint:
			s.weps = map[string]*api.WorkloadEndpoint{}
		}
		for _, r := range list {
			s.setResource(node, r)
		}
	}
}

// routeNode is what felix keeps of a Node: this node's whole (its
// labels select pools, its tunnel addresses are its devices'), of the
// others what routes to them need (addresses, VXLAN tunnel fields and
// WireGuard keys),
// so that a big cluster's nodes do not cost their labels and
// annotations on every node.
func routeNode(n *api.Node, local bool) *api.Node {
	if local {
		return n
	}
	out := &api.Node{Metadata: api.ObjectMeta{Name: n.Metadata.Name}, Spec: n.Spec, Status: n.Status}
	if b := n.Spec.BGP; b != nil {
		out.Spec.BGP = &api.NodeBGPSpec{IPv4Address: b.IPv4Address, IPv6Address: b.IPv6Address}
	}
	return out
}

func newPool(p *api.IPPool) *pool {
	api.SetDefaults(p)
	out := &pool{name: p.Metadata.Name, ipip: p.Spec.IPIPMode, vxlan: p.Spec.VXLANMode, nat: p.Spec.NATOutgoing}
	if pfx, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && !pfx.Addr().Is4In6() && pfx.Addr().Zone() == "" {
		out.cidr, out.exists = pfx.Masked(), true
	}
	if out.cidr.Addr().Is6() {
		// IPIP carries IPv4 only (the API refuses it; a pool written
		// around it is routed natively all the same).
		out.ipip = "Never"
	}
	// An unparseable selector (the API refuses it) selects no node.
	out.nodes, _ = kernel.ParsePoolNodeSelector(p.Spec.NodeSelector)
	return out
}

// sortedPools returns valid pools, most specific first, then by name,
// so lookups are deterministic.
func (s *state) sortedPools() []*pool {
	var ps []*pool
	for _, p := range s.pools {
		if p.exists {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].cidr.Bits() != ps[j].cidr.Bits() {
			return ps[i].cidr.Bits() > ps[j].cidr.Bits()
		}
		return ps[i].name < ps[j].name
	})
	return ps
}

// nodeAddr is a node's IPv4 address with prefix (10.0.0.5/24).
func (s *state) nodeAddr(name string) (netip.Prefix, bool) {
	n, ok := s.nodes[name]
	if !ok {
		return netip.Prefix{}, false
	}
	p, ok := n.Address()
	if !ok || !p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	return p, true
}

// nodeAddr6 is a node's IPv6 address with prefix (fd00:10::5/64).
func (s *state) nodeAddr6(name string) (netip.Prefix, bool) {
	n, ok := s.nodes[name]
	if !ok {
		return netip.Prefix{}, false
	}
	return n.Address6()
}

// nodeAddrFor is a node's address in the family of a.
func (s *state) nodeAddrFor(name string, a netip.Addr) (netip.Prefix, bool) {
	if a.Is4() {
		return s.nodeAddr(name)
	}
	return s.nodeAddr6(name)
}
