package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/confd"
	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/internal/supervise"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/cniserver"
	"github.com/routed-net/routed/routed/gc"
	"github.com/routed-net/routed/routed/health"
	"github.com/routed-net/routed/routed/identity"
	"github.com/routed-net/routed/routed/noderecord"
	"github.com/routed-net/routed/routed/reimport"
	"github.com/routed-net/routed/routed/status"
	"github.com/routed-net/routed/routed/tunneladdr"
)

// node is the running daemon's parts, wired together.
type node struct {
	ds      *datastore.Client
	guard   *identity.Guard
	feed    *feed.Feed
	felix   *felix.Felix // nil on a dedicated route reflector
	speaker *bgp.Speaker
	confd   *confd.Confd
	keeper  *noderecord.Keeper
	// wgKeys publishes this node's WireGuard keys on its Node (nil on
	// a route reflector).
	wgKeys *noderecord.KeyPublisher
	tunnel *tunneladdr.Loop  // nil on a route reflector
	cni    *cniserver.Server // nil on a route reflector or when off
	// reimport puts back the pods this node runs that the datastore
	// lost (nil on a route reflector).
	reimport *reimport.Reimporter
	// journal saves this node's endpoints as last trusted, for a
	// routed started while the datastore is held (nil on a reflector).
	journal *reimport.Journal
	ipam    *ipam.Client
	health  *health.Health
	reg     *prometheus.Registry
	beats   loopBeats
	// gcLeading is set while this node is the elected cluster GC
	// process (never with --cluster-gc=false).
	gcLeading atomic.Bool
	// flows are the node's flow record sinks (flows.go).
	flows *flowsParts
	// restoreGC puts the steady GOGC back once in sync (heaprelease.go).
	restoreGC func()
}

// build makes every part and subscribes each consumer to the node feed.
func build(cfg Config, ds *datastore.Client, guard *identity.Guard, addr noderecord.Addresses) (*node, error) {
	n := &node{ds: ds, guard: guard, ipam: ipam.New(ds), health: health.New(), reg: prometheus.NewRegistry(),
		beats: loopBeats{felix: &heartbeat.Beat{}, bgp: &heartbeat.Beat{}, datastore: &heartbeat.Beat{}}}
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fc, err := cfg.feedCache()
	if err != nil {
		return nil, err
	}
	n.feed = feed.New(ds, feed.Options{Gate: guard, Beat: n.beats.datastore, Cache: fc})
	n.reg.MustRegister(n.feed.Collectors()...)
	held, _ := guard.Frozen()
	fcs, err := readFelixConfig(ds, cfg.NodeName, held)
	if err != nil {
		return nil, err
	}

	bcfg := bgp.Config{
		Beat:       n.beats.bgp,
		NodeName:   cfg.NodeName,
		ListenPort: int32(cfg.BGPPort),
		StateDir:   filepath.Join(filepath.Dir(cfg.StatusSocket), "bgp-"+cfg.NodeName),
	}
	if cfg.Role == RoleNode {
		var err error
		if n.flows, err = newFlowsParts(cfg, n.reg); err != nil {
			return nil, err
		}
		n.wgKeys = noderecord.NewKeyPublisher(cfg.NodeName, n.held)
		fx, err := felix.New(withFelixConfig(felix.Config{
			WireGuard:      cfg.felixWireguard(n.wgKeys.Publish),
			Beat:           n.beats.felix,
			NodeName:       cfg.NodeName,
			ResyncInterval: cfg.FelixResync,
			MTUFile:        filepath.Join(cfg.StateDir, "mtu"),
			Features:       felix.Features{DisablePolicy: cfg.DisablePolicy},
			PolicyLog:      policy.LogConfig{Group: uint16(cfg.PolicyLogGroup), Rate: uint32(cfg.PolicyLogRate), Drops: cfg.PolicyLogDrops, FlowGroup: uint16(cfg.Flows.Group)},
			Flows:          n.flows.felix,
		}, fcs))
		if err != nil {
			return nil, err
		}
		if err := fx.Register(n.reg); err != nil {
			return nil, err
		}
		n.felix = fx
		fx.SetExternalNodes(externalNodes(fcs)) // before any tunnel comes up
		if cfg.DisablePolicy {
			log.Warn("network policy is NOT enforced on this node (--disable-policy): every pod reaches every pod, and tunl0 and the VXLAN devices unwrap IPIP and VXLAN from any source that reaches the node, with any inner source (no check of the outer source, docs/tunnel-sources.md)")
		}
		bcfg.RouteSink, bcfg.RouteStatus = fx, fx
		// Only the elected IPAM GC node exports the cluster-wide usage.
		// It accounts from the feed's block tallies (the feed decodes every
		// block for felix's and BGP's borrowed addresses), not a read of
		// every block.
		n.reg.MustRegister(ipam.NewCollector(n.ipam, 5*time.Second).UsageWhen(n.gcLeading.Load).Tallies(n.feed.BlockTallies))
	}
	sp, err := bgp.New(bcfg)
	if err != nil {
		return nil, err
	}
	n.speaker = sp
	opts := []confd.Option{confd.WithSecretsDir(cfg.SecretsDir)}
	if n.felix != nil {
		opts = append(opts, confd.WithPeerRoutes(n.felix), confd.WithWorkloadPeering(n.felix))
	}
	n.confd = confd.New(sp, cfg.NodeName, opts...)
	n.keeper = noderecord.NewKeeper(cfg.NodeName, addr)

	// confd and the journal want this node's endpoints only: the others
	// (every pod in the cluster) are dropped by name, never decoded.
	ownEndpoints := feed.OnlyNames(api.KindWorkloadEndpoint, func(name string) bool {
		return api.IsNodeWorkloadEndpointName(name, cfg.NodeName)
	})
	n.feed.Subscribe("confd", confd.Kinds, n.confd.Consumer(), ownEndpoints)
	n.feed.Subscribe("node record keeper", noderecord.Kinds, n.keeper)
	base, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	n.feed.Subscribe("felix configuration", []api.Kind{api.KindFelixConfiguration},
		newFelixConfig(cfg.NodeName, base, n.felix, fcs), felixConfigNames(cfg.NodeName))
	spc := sp.Consumer()
	n.feed.Subscribe("bgp", spc.SubscribedKinds(), spc)
	if n.felix != nil {
		fxc := n.felix.Consumer()
		n.feed.Subscribe("felix", fxc.SubscribedKinds(), fxc, fxc.Options()...)
		n.journal = reimport.NewJournal(filepath.Join(cfg.StateDir, "local-endpoints.json"), cfg.NodeName, guard.ClusterGUID)
		if _, err := n.journal.Load(guard.ClusterGUID()); err != nil {
			log.WithError(err).Warn("starting without a saved view of this node's endpoints")
		}
		n.feed.Subscribe("endpoint journal", reimport.JournalKinds, n.journal, ownEndpoints)
		n.reimport = reimport.New(reimport.Config{DS: ds, IPAM: n.ipam, Node: cfg.NodeName,
			Endpoints: n.trustedEndpoints, LinkExists: linkExists, Held: guard.Frozen})
		guard.BeforeTrust(n.reimportBeforeTrust, n.feed.Rejudge)
		n.tunnel = tunneladdr.New(ds, n.ipam, cfg.NodeName, n.held)
		n.feed.Subscribe("tunnel address", tunneladdr.Kinds, n.tunnel)
		n.feed.Subscribe("wireguard keys", noderecord.Kinds, n.wgKeys)
		if sock := cfg.cniSocket(); sock != "" {
			n.cni = cniserver.New(cniserver.Config{Socket: sock, Node: cfg.NodeName, DS: ds,
				IPAM: ipam.New(ds, ipam.WithWatchedPools()), Held: guard.Frozen})
			n.feed.Subscribe("cni socket", cniserver.Kinds, n.cni)
		}
	}
	n.addHealthChecks()
	return n, nil
}

// held reports whether the datastore is not trusted: parts that write
// to it write nothing then.
func (n *node) held() bool { f, _ := n.guard.Frozen(); return f }

// start runs every part under g. Parts that can run again after a
// failure are restarted; the others stop the daemon with their reason.
func (n *node) start(g *supervise.Group, cfg Config) {
	g.Go("node feed", supervise.Fatal, n.feed.Run)
	// The guard's work before the node follows the datastore again runs
	// under the daemon's context, off the feed's goroutine.
	g.Go("identity guard", supervise.Fatal, n.guard.Run)
	g.Go("bgp", supervise.Fatal, n.speaker.Run)
	g.Go("confd", supervise.Fatal, n.confd.Run)
	g.Go("node record keeper", supervise.Restart, func(ctx context.Context) error { return n.keeper.Run(ctx, n.ds) })
	if n.felix != nil {
		g.Go("felix", supervise.Restart, n.felix.Run)
		g.Go("tunnel address", supervise.Restart, n.tunnel.Run)
		g.Go("wireguard keys", supervise.Restart, func(ctx context.Context) error { return n.wgKeys.Run(ctx, n.ds) })
		g.Go("endpoint journal", supervise.Restart, n.journal.Run)
		if n.flows.sender != nil {
			g.Go("flows sender", supervise.Restart, n.flows.runSender)
		}
		if cfg.IPAMGCPeriod > 0 {
			if !cfg.ClusterGC {
				log.Info("the cluster-wide GC is left to routed cluster-gc (--cluster-gc=false): this node releases only its own empty blocks")
			}
			gm := gc.NewMetrics()
			n.reg.MustRegister(gm.Collectors()...)
			g.Go("ipam gc", supervise.Restart, func(ctx context.Context) error {
				return gc.Run(ctx, gc.Config{DS: n.ds, IPAM: n.ipam, Node: cfg.NodeName, Cluster: cfg.ClusterGC, Name: cfg.NodeName, Period: cfg.IPAMGCPeriod,
					Grace: cfg.IPAMGCGrace, Held: n.held, Leading: &n.gcLeading, Metrics: gm})
			})
		}
	}
	inSync := n.feed.Synced
	if n.felix != nil {
		inSync = func() bool { return n.feed.Synced() && n.felix.Applied() }
	}
	g.Go("start-up heap", supervise.Restart, func(ctx context.Context) error {
		return releaseStartHeap(ctx, inSync, n.restoreGC, log.WithField("component", "daemon"))
	})
	startNodeCondition(g, cfg, inSync)
	if n.cni != nil {
		// The plugins use etcd directly while it is down.
		g.Go("cni socket", supervise.Restart, n.cni.Run)
	}
	st := status.NewServer(cfg.StatusSocket, n.speaker)
	if n.felix != nil {
		st.WithPolicyCounters(n.policyCounters).WithPolicyLog(n.policyLog).WithPolicyUnreadable(n.policyUnreadable).WithReimport(n.reimport.Run).
			WithWireguard(status.WireguardFuncs{Read: n.wireguardStatus, Rotate: n.rotateWireguard})
	}
	g.Go("status socket", supervise.Fatal, st.Run)
	if cfg.HealthAddr != "" {
		g.Go("health server", supervise.Fatal, func(ctx context.Context) error { return serveHTTP(ctx, cfg.HealthAddr, n.health.Handler()) })
	}
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
		g.Go("metrics server", supervise.Fatal, func(ctx context.Context) error { return serveHTTP(ctx, cfg.MetricsAddr, mux) })
	}
}

// serveHTTP serves h on addr until ctx ends. It returns once the server
// is shut down (requests in flight get up to 2 s) and its shutdown
// goroutine has ended, also when Serve fails on its own.
func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served, shut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(shut)
		select {
		case <-ctx.Done():
		case <-served:
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err = srv.Serve(l)
	close(served)
	<-shut // Serve returns as Shutdown starts; Shutdown waits for requests
	if !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// policyCounters answers the status socket from felix's kernel counters.
func (n *node) policyCounters(ctx context.Context) ([]status.PolicyCounter, error) {
	cs, err := n.felix.PolicyCounters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]status.PolicyCounter, len(cs))
	for i, c := range cs {
		out[i] = status.PolicyCounter(c)
	}
	return out, nil
}

// policyUnreadable answers the status socket with the policy records
// felix denies for because they do not decode.
func (n *node) policyUnreadable() []status.UnreadableRecord {
	rs := n.felix.UnreadableRecords()
	out := make([]status.UnreadableRecord, len(rs))
	for i, r := range rs {
		out[i] = status.UnreadableRecord{Kind: string(r.Kind), Name: r.Name, Scope: r.Scope, Key: datastore.Key(r.Kind, r.Name), Error: r.Error}
	}
	return out
}

// policyLog answers the status socket from felix's policy log.
func (n *node) policyLog(ctx context.Context, since uint64, tail int, follow bool, emit func([]status.PolicyLogRecord) error) error {
	if since == 0 && tail > 0 {
		since = n.felix.PolicyLogTail(tail)
	}
	return n.felix.PolicyLog(ctx, since, follow, emit)
}
