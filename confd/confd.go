// Package confd turns the datastore's Node, BGPConfiguration and BGPPeer
// resources into the local BGP speaker's configuration: its identity
// (AS number, router ID, port) and the sessions it should have.
//
// The computation (Compute) is a pure function of the resources; Confd
// runs it whenever they change and hands the result to the speaker,
// which touches only sessions whose settings changed.
package confd

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/routed/bgp"
)

// Speaker is what confd configures; *bgp.Speaker implements it.
type Speaker interface {
	SetGlobal(bgp.Global)
	SetPeers([]bgp.Peer)
	SetServiceCIDRs([]netip.Prefix)
	SetPrefixCommunities([]bgp.PrefixCommunities)
	SetFilters(map[netip.Addr]bgp.PeerFilters)
	SetNoExportCIDRs([]netip.Prefix)
}

// problemSink is told why BGP cannot be configured ("" once it can), for
// status; *bgp.Speaker implements it.
type problemSink interface {
	SetConfigProblem(string)
}

// PeerRouteSink programs the routes to peers with reachableBy (felix on
// a node): peer address to gateway, the whole set each time.
type PeerRouteSink interface {
	SetPeerRoutes(map[netip.Addr]netip.Addr)
}

// WorkloadPeeringSink puts the addresses local pods peer with on the
// host side of their interfaces (felix on a node): per pod interface,
// the whole set each time.
type WorkloadPeeringSink interface {
	SetWorkloadPeering(map[string][]netip.Addr)
}

// Confd takes its resources from the node feed (Consumer) and configures
// a Speaker.
type Confd struct {
	sp         Speaker
	routes     PeerRouteSink       // nil: nothing programs them (route reflector)
	wlPeering  WorkloadPeeringSink // nil: no pod interfaces (route reflector)
	node       string
	secretsDir string
	resync     time.Duration
	log        *logrus.Entry
	ch         chan func(*cache) bool
	done       chan struct{}
}

// Option changes a Confd setting.
type Option func(*Confd)

// WithSecretsDir sets where secretKeyRef passwords are read
// (default DefaultSecretsDir).
func WithSecretsDir(dir string) Option { return func(c *Confd) { c.secretsDir = dir } }

// WithResyncInterval sets how often passwords are re-read even without a
// datastore change (default 30 s), so rotated secrets are picked up.
func WithResyncInterval(d time.Duration) Option { return func(c *Confd) { c.resync = d } }

// WithPeerRoutes sets where the routes to peers with reachableBy go.
func WithPeerRoutes(sink PeerRouteSink) Option { return func(c *Confd) { c.routes = sink } }

// WithWorkloadPeering sets where the addresses pods peer with go.
func WithWorkloadPeering(sink WorkloadPeeringSink) Option {
	return func(c *Confd) { c.wlPeering = sink }
}

// New returns a Confd for nodeName. Subscribe its Consumer to the node
// feed for Kinds, then Run it.
func New(sp Speaker, nodeName string, opts ...Option) *Confd {
	c := &Confd{sp: sp, node: nodeName, secretsDir: DefaultSecretsDir, resync: 30 * time.Second,
		log: logrus.WithFields(logrus.Fields{"component": "confd", "node": nodeName}),
		ch:  make(chan func(*cache) bool, 64), done: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Kinds are the resource kinds confd reads: WorkloadEndpoints (this
// node's) and Profiles for BGPPeers' localWorkloadSelector.
var Kinds = []api.Kind{api.KindNode, api.KindBGPConfiguration, api.KindBGPPeer, api.KindBGPFilter, api.KindIPPool,
	api.KindWorkloadEndpoint, api.KindProfile}

// Consumer is confd's subscription to the node feed (for Kinds); its
// calls block until Run takes them, and return at once after Run ended.
func (c *Confd) Consumer() feed.Consumer { return &handler{ch: c.ch, done: c.done, node: c.node} }

// Run configures the speaker until ctx ends. Run once.
func (c *Confd) Run(ctx context.Context) error {
	defer close(c.done)
	ch := c.ch

	st := &state{cache: newCache(c.node)}
	tick := time.NewTicker(c.resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-ch:
			changed := f(st.cache)
			// Apply whatever else already arrived before recomputing.
			for drained := false; !drained; {
				select {
				case f := <-ch:
					changed = f(st.cache) || changed
				default:
					drained = true
				}
			}
			if !changed {
				continue // other nodes' pods only
			}
		case <-tick.C:
		}
		if st.cache.synced {
			c.push(st)
		}
	}
}

// state is owned by Run's goroutine.
type state struct {
	cache       *cache
	lastGlobal  *bgp.Global
	lastPeers   []bgp.Peer
	lastSvc     []netip.Prefix
	lastNoExp   []netip.Prefix
	noExpSent   bool
	lastComms   []bgp.PrefixCommunities
	commsSent   bool
	lastFilter  string // fmt of the filters last set
	filtersSent bool
	peersSent   bool
	lastProb    string
	lastWarn    []string
	lastRoutes  map[netip.Addr]netip.Addr
	routesSent  bool
	lastWLPeer  map[string][]netip.Addr
	wlPeerSent  bool
}

// push computes the wanted configuration and hands the speaker what
// changed since the last push.
func (c *Confd) push(st *state) {
	d := Compute(st.cache.input(c.node))
	if !slices.Equal(d.Warnings, st.lastWarn) {
		for _, w := range d.Warnings {
			c.log.Warn(w)
		}
		st.lastWarn = d.Warnings
	}
	if d.Problem != st.lastProb {
		if d.Problem != "" {
			c.log.Warn(d.Problem + "; BGP waits for it")
		}
		if p, ok := c.sp.(problemSink); ok {
			p.SetConfigProblem(d.Problem)
		}
		st.lastProb = d.Problem
	}
	if d.Problem != "" {
		return
	}
	if st.lastGlobal == nil || *st.lastGlobal != d.Global {
		g := d.Global
		st.lastGlobal = &g
		f := logrus.Fields{"asn": g.ASN, "routerID": g.RouterID, "port": g.ListenPort}
		if g.IPv6.IsValid() {
			f["ipv6"] = g.IPv6
		}
		if g.RouterIDDerived {
			f["routerIDFrom"] = "node name (no IPv4 address)"
		}
		c.log.WithFields(f).Info("BGP identity")
		c.sp.SetGlobal(g)
	}
	if !slices.Equal(d.ServiceCIDRs, st.lastSvc) {
		st.lastSvc = d.ServiceCIDRs
		c.sp.SetServiceCIDRs(d.ServiceCIDRs)
	}
	if !st.noExpSent || !slices.Equal(d.NoExportCIDRs, st.lastNoExp) {
		st.lastNoExp, st.noExpSent = d.NoExportCIDRs, true
		if len(d.NoExportCIDRs) > 0 {
			c.log.WithField("cidrs", fmt.Sprint(d.NoExportCIDRs)).Info("pools with disableBGPExport: not advertised to any peer")
		}
		c.sp.SetNoExportCIDRs(d.NoExportCIDRs)
	}
	if !st.commsSent || !slices.EqualFunc(d.Communities, st.lastComms, func(a, b bgp.PrefixCommunities) bool {
		return a.CIDR == b.CIDR && slices.Equal(a.Communities, b.Communities)
	}) {
		st.lastComms, st.commsSent = d.Communities, true
		c.sp.SetPrefixCommunities(d.Communities)
	}
	if key := fmt.Sprint(d.Filters); !st.filtersSent || key != st.lastFilter {
		st.lastFilter, st.filtersSent = key, true
		c.sp.SetFilters(d.Filters)
	}
	if !st.routesSent || !maps.Equal(d.PeerRoutes, st.lastRoutes) {
		st.lastRoutes, st.routesSent = d.PeerRoutes, true
		switch {
		case len(d.PeerRoutes) > 0 && c.routes == nil:
			c.log.WithField("routes", fmt.Sprint(d.PeerRoutes)).Warn("reachableBy is not honoured on a dedicated route reflector (it programs no routes): route these peers by hand")
		case len(d.PeerRoutes) > 0:
			c.log.WithField("routes", fmt.Sprint(d.PeerRoutes)).Info("routes to peers with reachableBy (peer: gateway)")
		}
		if c.routes != nil {
			c.routes.SetPeerRoutes(d.PeerRoutes)
		}
	}
	if !st.wlPeerSent || !maps.EqualFunc(d.WorkloadPeering, st.lastWLPeer, slices.Equal) {
		st.lastWLPeer, st.wlPeerSent = d.WorkloadPeering, true
		switch {
		case len(d.WorkloadPeering) > 0 && c.wlPeering == nil:
			c.log.Warn("localWorkloadSelector matches pods but nothing here puts the peering address on their interfaces (no felix)")
		case len(d.WorkloadPeering) > 0:
			c.log.WithField("interfaces", fmt.Sprint(d.WorkloadPeering)).Info("workload peering addresses (pod interface: addresses)")
		}
		if c.wlPeering != nil {
			c.wlPeering.SetWorkloadPeering(d.WorkloadPeering)
		}
	}
	peers := resolvePeers(d.Peers, c.secretsDir)
	if st.peersSent && slices.Equal(peers, st.lastPeers) {
		return
	}
	for _, p := range peers {
		if p.ConfigError != "" {
			c.log.WithField("peer", p.Address).Warn(p.ConfigError)
		}
	}
	c.log.WithField("peers", fmt.Sprint(peers)).Info("BGP peers changed")
	st.lastPeers, st.peersSent = peers, true
	c.sp.SetPeers(peers)
}

// cache holds the synced resources by name.
type cache struct {
	node    string
	synced  bool
	nodes   map[string]*api.Node
	configs map[string]*api.BGPConfiguration
	peers   map[string]*api.BGPPeer
	filters map[string]*api.BGPFilter
	pools   map[string]*api.IPPool
	// weps are this node's WorkloadEndpoints only.
	weps     map[string]*api.WorkloadEndpoint
	profiles map[string]*api.Profile
}

func newCache(node string) *cache {
	return &cache{node: node, nodes: map[string]*api.Node{}, configs: map[string]*api.BGPConfiguration{}, peers: map[string]*api.BGPPeer{},
		filters: map[string]*api.BGPFilter{}, pools: map[string]*api.IPPool{},
		weps: map[string]*api.WorkloadEndpoint{}, profiles: map[string]*api.Profile{}}
}

// set records r and reports whether it can change what confd computes:
// another node's WorkloadEndpoint cannot.
func (c *cache) set(r api.Resource) bool {
	switch v := r.(type) {
	case *api.WorkloadEndpoint:
		if v.Spec.Node != c.node {
			_, had := c.weps[v.Metadata.Name]
			delete(c.weps, v.Metadata.Name)
			return had
		}
		c.weps[v.Metadata.Name] = v
	case *api.Profile:
		c.profiles[v.Metadata.Name] = v
	case *api.Node:
		c.nodes[v.Metadata.Name] = v
	case *api.BGPConfiguration:
		c.configs[v.Metadata.Name] = v
	case *api.BGPPeer:
		c.peers[v.Metadata.Name] = v
	case *api.BGPFilter:
		c.filters[v.Metadata.Name] = v
	case *api.IPPool:
		c.pools[v.Metadata.Name] = v
	}
	return true
}

// del removes a resource and reports whether confd used it.
func (c *cache) del(k api.Kind, name string) bool {
	switch k {
	case api.KindWorkloadEndpoint:
		_, had := c.weps[name]
		delete(c.weps, name)
		return had
	case api.KindProfile:
		delete(c.profiles, name)
	case api.KindNode:
		delete(c.nodes, name)
	case api.KindBGPConfiguration:
		delete(c.configs, name)
	case api.KindBGPPeer:
		delete(c.peers, name)
	case api.KindBGPFilter:
		delete(c.filters, name)
	case api.KindIPPool:
		delete(c.pools, name)
	}
	return true
}

func (c *cache) input(node string) Input {
	in := Input{NodeName: node}
	for _, n := range c.nodes {
		in.Nodes = append(in.Nodes, n)
	}
	for _, v := range c.configs {
		in.Configs = append(in.Configs, v)
	}
	for _, p := range c.peers {
		in.Peers = append(in.Peers, p)
	}
	in.Filters = c.filters
	for _, p := range c.pools {
		in.Pools = append(in.Pools, p)
	}
	for _, w := range c.weps {
		in.Workloads = append(in.Workloads, w)
	}
	in.Profiles = c.profiles
	return in
}

// handler forwards datastore callbacks to Run's goroutine as closures
// over the cache it owns.
type handler struct {
	ch   chan<- func(*cache) bool
	done <-chan struct{}
	node string
}

func (h *handler) send(f func(*cache) bool) {
	select {
	case h.ch <- f:
	case <-h.done:
	}
}

// OnBatch implements feed.Consumer.
func (h *handler) OnBatch(b feed.Batch) {
	h.send(func(c *cache) bool {
		changed := b.Snapshot
		if b.Snapshot {
			*c = *newCache(h.node)
			c.synced = true
		}
		for _, u := range b.Updates {
			if u.Deleted {
				changed = c.del(u.Kind, u.Name) || changed
			} else {
				changed = c.set(u.Resource) || changed
			}
		}
		return changed
	})
}
