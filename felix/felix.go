package felix

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// Felix is the node's dataplane programmer. Its input methods may be
// called from any goroutine at any time, before or during Run; they only
// queue the change. The node feed's batches are not queued here: Run
// takes them one at a time (Consumer), so their backlog stays in the
// feed. Run owns all state in one goroutine and programs the kernel.
// Nothing is removed when Run returns: routes, tunl0 and the NAT table
// stay so a restarted felix (and the BGP graceful restart around it)
// finds the dataplane intact.
type Felix struct {
	cfg     Config
	log     *logrus.Entry
	metrics *routetable.Metrics
	filters *filterState

	mu      sync.Mutex
	pending []func(*loop) // what the input methods queued, in order
	wake    chan struct{} // a token: pending has work
	// batches hands the node feed's batches to Run (unbuffered: the
	// feed's OnBatch returns once the loop has taken one).
	batches chan feed.Batch
	// counterReqs asks the policy counter goroutine for a fresh read.
	counterReqs chan counterReq
	// plog keeps the policy log records across restarts of Run.
	plog *flowlog.Ring
	// flows is the model of flow records (flows_glue.go); nil: off.
	flows *flowsState
	// wg is the WireGuard part; it keeps its devices across restarts of
	// Run (wireguard_loop.go).
	wg *wgState

	// unreadable lists the records felix denies for, as its loop last
	// left them (UnreadableRecords).
	unreadable atomic.Pointer[[]policy.UnreadableRecord]

	running atomic.Bool
	applied atomic.Bool
	rt      atomic.Pointer[routetable.RouteTable]
}

// Applied reports whether felix has programmed the dataplane in full at
// least once since it started; readiness waits for it.
func (f *Felix) Applied() bool { return f.applied.Load() }

// New validates cfg and returns a Felix ready for inputs and Run.
func New(cfg Config) (*Felix, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lg := cfg.Log.WithField("node", cfg.NodeName)
	return &Felix{
		cfg: cfg, log: lg, wg: newWGState(&cfg, lg),
		metrics: routetable.NewMetrics(), filters: newFilterState(), wake: make(chan struct{}, 1), batches: make(chan feed.Batch),
		counterReqs: make(chan counterReq), plog: flowlog.NewRing(DefaultPolicyLogRing), flows: newFlowsState(&cfg),
	}, nil
}

// Collectors returns felix's Prometheus collectors (routes programmed,
// resync duration, apply failures, learned routes filtered); nothing is
// registered globally.
func (f *Felix) Collectors() []prometheus.Collector {
	return append(f.metrics.Collectors(), f.filters.gauge, newPolicyCollector(f), newWireguardCollector(f))
}

// Register registers Collectors with reg.
func (f *Felix) Register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range f.Collectors() {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}

// enqueue hands work to the Run goroutine without blocking.
func (f *Felix) enqueue(fn func(*loop)) {
	f.mu.Lock()
	f.pending = append(f.pending, fn)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *Felix) takePending() []func(*loop) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pending
	f.pending = nil
	return p
}

// ReplaceResources replaces everything of the kinds present as keys in
// rs with rs; the first call marks the resource state as synced.
func (f *Felix) ReplaceResources(rs map[api.Kind][]api.Resource) { f.ReplaceEncoded(rs, nil) }

// ReplaceEncoded is ReplaceResources with the snapshot's endpoints
// undecoded (felix's subscription takes them so: FeedConsumer.Options):
// the loop decodes them a chunk at a time and hands each to the routes'
// state, the policy and the flow records, so that what felix keeps of a
// big cluster's endpoints is made while only a chunk of them is live,
// not among a whole decoded snapshot (feed.Encoded).
func (f *Felix) ReplaceEncoded(rs map[api.Kind][]api.Resource, enc []feed.Encoded) {
	f.enqueue(func(l *loop) {
		l.replace(rs, enc, f.flows)
		l.resourcesSynced = true
		l.planDirty = true
	})
}

// replace makes the loop's resources, the policy's and the flow
// records' those of a snapshot: rs, decoded, and enc, undecoded
// endpoints decoded here as they are set. The flow records' model is
// made anew beside the one in use and takes its place at the end, so
// flows are named throughout.
func (l *loop) replace(rs map[api.Kind][]api.Resource, enc []feed.Encoded, flows *flowsState) {
	enc = decodeOthers(rs, enc)
	if _, ok := rs[api.KindWorkloadEndpoint]; !ok && len(enc) > 0 {
		rs[api.KindWorkloadEndpoint] = nil
	}
	next := flows.staging()
	next.setAll(rs)
	l.st.replaceResources(l.cfg.NodeName, rs)
	l.policyReplace(rs, enc, func(r api.Resource) {
		l.st.setResource(l.cfg.NodeName, r)
		next.set(r)
	}, func(name string, known, read []netip.Prefix, why error) {
		next.unreadableEndpoint(name, known, read, why)
	})
	flows.adopt(next)
}

// decodeOthers decodes into rs the undecoded objects of kinds other than
// endpoints (felix asks for endpoints alone undecoded) and returns the
// endpoints.
func decodeOthers(rs map[api.Kind][]api.Resource, enc []feed.Encoded) []feed.Encoded {
	var others []feed.Encoded
	n := 0
	for _, e := range enc {
		if e.Kind() == api.KindWorkloadEndpoint {
			enc[n] = e
			n++
		} else {
			others = append(others, e)
		}
	}
	feed.DecodeEach(others, func(r api.Resource) { rs[r.GetKind()] = append(rs[r.GetKind()], r) })
	return enc[:n]
}

// SetResource records a created or updated IPPool, Node or
// WorkloadEndpoint; other kinds are ignored.
func (f *Felix) SetResource(r api.Resource) {
	f.enqueue(func(l *loop) {
		if l.st.setResource(l.cfg.NodeName, r) {
			l.planDirty = true
		}
		l.policySet(r)
		f.flows.set(r)
	})
}

// DeleteResource records a deletion.
func (f *Felix) DeleteResource(k api.Kind, name string) {
	f.enqueue(func(l *loop) {
		if l.st.deleteResource(k, name) {
			l.planDirty = true
		}
		l.policyDelete(k, name)
		f.flows.delete(k, name)
	})
}

// ReplaceAffinities replaces all block affinities (all nodes'); the first
// call marks affinity state as synced.
func (f *Felix) ReplaceAffinities(all []BlockAffinity) {
	f.enqueue(func(l *loop) {
		l.st.affinities = make(map[affKey]BlockAffinity, len(all))
		for _, a := range all {
			l.st.affinities[affKey{a.Node, a.CIDR.Masked()}] = a
		}
		l.affinitiesSynced = true
		l.planDirty = true
	})
}

// UpdateAffinity records one affinity change.
func (f *Felix) UpdateAffinity(a BlockAffinity, deleted bool) {
	f.enqueue(func(l *loop) {
		k := affKey{a.Node, a.CIDR.Masked()}
		if deleted {
			delete(l.st.affinities, k)
		} else {
			l.st.affinities[k] = a
		}
		l.planDirty = true
	})
}

// RouteUpdate records the best path the BGP speaker learned for prefix
// from peer. Whether it reaches the kernel is the import guard's call
// (guard.go). Safe for concurrent use; it only queues the change.
func (f *Felix) RouteUpdate(prefix netip.Prefix, nextHop, peer netip.Addr, priority uint32) {
	f.enqueue(func(l *loop) {
		l.st.learned[prefix.Masked()] = learnedRoute{nextHop: nextHop.Unmap(), peer: peer.Unmap(), priority: priority}
		l.planDirty = true
	})
}

// SetPeerRoutes sets the routes to BGP peers with reachableBy (confd's
// PeerRouteSink): each peer address (a /32 or /128) through its gateway.
// They beat a learned route for the same prefix, as BIRD's static
// routes do in Calico. Safe for concurrent use; it only queues the change.
func (f *Felix) SetPeerRoutes(routes map[netip.Addr]netip.Addr) {
	m := maps.Clone(routes)
	f.enqueue(func(l *loop) {
		l.st.peerRoutes = m
		l.planDirty = true
	})
}

// RouteWithdraw removes a learned route; unknown prefixes are ignored.
func (f *Felix) RouteWithdraw(prefix netip.Prefix) {
	f.enqueue(func(l *loop) {
		if _, ok := l.st.learned[prefix.Masked()]; ok {
			delete(l.st.learned, prefix.Masked())
			l.planDirty = true
		}
	})
}

// Programmed reports whether felix's route for prefix is in the kernel as
// wanted. Safe for concurrent use.
func (f *Felix) Programmed(prefix netip.Prefix) bool {
	rt := f.rt.Load()
	return rt != nil && rt.Programmed(prefix.Masked())
}

// LocalEndpoints returns this node's workload endpoints as felix holds
// them: the last view of the datastore the node trusted (nothing changes
// it while the node holds). The read runs on felix's loop.
func (f *Felix) LocalEndpoints(ctx context.Context) ([]*api.WorkloadEndpoint, error) {
	reply := make(chan []*api.WorkloadEndpoint, 1)
	f.enqueue(func(l *loop) {
		out := make([]*api.WorkloadEndpoint, 0, len(l.st.weps))
		for _, w := range l.st.weps {
			out = append(out, w)
		}
		reply <- out
	})
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("felix: local endpoints: %w", ctx.Err())
	case ws := <-reply:
		return ws, nil
	}
}

// Settings are what the cluster's FelixConfiguration sets in a running
// felix (routed/daemon follows "default" and "node.<name>"): the tunnel
// MTUs, 0 deriving them from the host MTU as Config's do, and the VXLAN
// VNI and port, 0 for Calico's defaults.
type Settings struct {
	IPIPMTU, VXLANMTU, VXLANMTUV6 int
	VXLANVNI, VXLANPort           int
}

// ApplySettings changes the settings of a running felix: the tunnel
// devices and the pod MTU file follow on the loop's next pass. Safe for
// concurrent use; it only queues the change.
func (f *Felix) ApplySettings(s Settings) {
	f.enqueue(func(l *loop) {
		c := l.cfg
		if c.IPIPMTU == s.IPIPMTU && c.VXLANMTU == s.VXLANMTU && c.VXLANMTUV6 == s.VXLANMTUV6 &&
			c.VXLANVNI == s.VXLANVNI && c.VXLANPort == s.VXLANPort {
			return
		}
		l.log.WithFields(logrus.Fields{"ipipMTU": s.IPIPMTU, "vxlanMTU": s.VXLANMTU, "vxlanMTUV6": s.VXLANMTUV6, "vxlanVNI": s.VXLANVNI, "vxlanPort": s.VXLANPort}).
			Info("tunnel settings from FelixConfiguration (0: the default)")
		// Only the loop reads these fields, on this goroutine.
		c.IPIPMTU, c.VXLANMTU, c.VXLANMTUV6 = s.IPIPMTU, s.VXLANMTU, s.VXLANMTUV6
		c.VXLANVNI, c.VXLANPort = s.VXLANVNI, s.VXLANPort
		l.tunnelDirty, l.vxlanDirty = true, true
		l.hosts.peersDirty = true // host endpoints let the new VXLAN port through
	})
}
