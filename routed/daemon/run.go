package daemon

import (
	"context"
	"errors"
	"fmt"
	"github.com/routed-net/routed/internal/heartbeat"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/confd"
	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/status"
)

// Run starts the daemon and blocks until ctx ends (SIGTERM). On the way
// out nothing is flushed: routes stay in the kernel and BGP sessions are
// dropped without a Cease, so peers keep this node's routes (graceful
// restart) and pods keep forwarding while routed restarts.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if lvl, err := logrus.ParseLevel(cfg.LogLevel); err == nil {
		logrus.SetLevel(lvl)
	} else {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := log.WithFields(logrus.Fields{"node": cfg.NodeName, "role": cfg.Role})

	// The CNI plugin's kubeconfig does not depend on etcd: it is written
	// first, before the datastore retries below can hold the start up.
	if cfg.Role == RoleNode && cfg.CNIToken.Kubeconfig != "" {
		stop, err := startCNIToken(ctx, cfg.CNIToken, cfg.StateDir, filepath.Dir(cfg.StatusSocket))
		if err != nil {
			return err
		}
		defer stop()
	}

	if cfg.EmbeddedEtcdDir != "" {
		srv, err := etcdserver.Start(ctx, etcdserver.Config{Dir: cfg.EmbeddedEtcdDir, ClientAddr: cfg.EmbeddedEtcdAddr})
		if err != nil {
			return err
		}
		defer srv.Close()
		cfg.Datastore.Endpoints = srv.Endpoints
	}
	ds, err := datastore.New(cfg.Datastore)
	if err != nil {
		return err
	}
	defer ds.Close()

	addr, err := nodeAddress(cfg)
	if err != nil {
		return err
	}
	log = log.WithField("address", addr.V4)
	if addr.V6.IsValid() {
		log = log.WithField("address6", addr.V6)
	}
	// etcd may come up after us (DaemonSet start order); keep trying.
	guard := newDatastoreGuard(ds, cfg.StateDir)
	if err := retry(ctx, "read the cluster identity", func() error { return guard.start(ctx) }); err != nil {
		return err
	}
	if frozen, why := guard.Frozen(); frozen {
		// Write nothing into a datastore we do not trust: the node
		// registers once it is restored or re-initialised (nodeKeeper).
		log.WithField("reason", why).Error("not registering: the datastore is not the one this node knows")
	} else {
		if err := retry(ctx, "register the node", func() error {
			_, err := RegisterNode(ctx, ds, cfg.NodeName, addr)
			return err
		}); err != nil {
			return err
		}
		if err := EnsureDefaultPool(ctx, ds, cfg.Pool); err != nil {
			log.WithError(err).Warn("could not create the default pool")
		}
	}
	held := func() bool { f, _ := guard.Frozen(); return f }
	if err := writeStateFile(cfg.StateDir, "nodename", cfg.NodeName); err != nil {
		return fmt.Errorf("state dir %s: %w", cfg.StateDir, err)
	}
	ic := ipam.New(ds)

	health := NewHealth()
	beats := loopBeats{felix: &heartbeat.Beat{}, bgp: &heartbeat.Beat{}, datastore: &heartbeat.Beat{}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var fx *felix.Felix
	var gcLeading atomic.Bool // while this node is the elected IPAM GC node
	bcfg := bgp.Config{
		Beat:       beats.bgp,
		NodeName:   cfg.NodeName,
		ListenPort: int32(cfg.BGPPort),
		StateDir:   filepath.Join(filepath.Dir(cfg.StatusSocket), "bgp-"+cfg.NodeName),
	}
	if cfg.Role == RoleNode {
		fx, err = felix.New(felix.Config{
			Beat:           beats.felix,
			NodeName:       cfg.NodeName,
			ResyncInterval: cfg.FelixResync,
			MTUFile:        filepath.Join(cfg.StateDir, "mtu"),
		})
		if err != nil {
			return err
		}
		if err := fx.Register(reg); err != nil {
			return err
		}
		bcfg.RouteSink, bcfg.RouteStatus = fx, fx
		// Only the elected IPAM GC node exports the cluster-wide usage.
		reg.MustRegister(ipam.NewCollector(ic, 5*time.Second).UsageWhen(gcLeading.Load))
	}
	speaker, err := bgp.New(bcfg)
	if err != nil {
		return err
	}
	cd := confd.New(ds, speaker, cfg.NodeName, confd.WithSecretsDir(cfg.SecretsDir), confd.WithExternalSync())
	// One datastore sync for felix and confd: each kind is watched once,
	// and this node's endpoints only.
	feed := &datastore.Fanout{}
	feed.Add(confd.Kinds, cd.Handler())
	keeper := newNodeKeeper(cfg.NodeName, addr)
	feed.Add(nodeKeeperKinds, keeper)

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				log.WithError(err).WithField("task", name).Error("component failed")
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}

	aff := &affinityFanout{handlers: []ipam.AffinityHandler{speaker}}
	if fx != nil {
		aff.handlers = append(aff.handlers, fx)
		goRun("felix", fx.Run)
		borrowed := &borrowFanout{node: cfg.NodeName, felix: fx, speaker: speaker}
		goRun("borrowed addresses watch", guard.restartable(func(ctx context.Context) error {
			return ipam.WatchBorrowed(ctx, ds, gatedBorrows{guard, borrowed})
		}))
		feed.Add(felix.SyncKinds, fx)
		tk := newTunnelKick(cfg.NodeName)
		feed.Add(tunnelKinds, tk)
		goRun("tunnel address", func(ctx context.Context) error { return tunnelLoop(ctx, ds, ic, cfg.NodeName, tk.ch, held) })
		if cfg.IPAMGCPeriod > 0 {
			goRun("ipam gc", func(ctx context.Context) error { return gcLoop(ctx, ds, ic, cfg, held, &gcLeading) })
		}
	}
	goRun("affinity watch", guard.restartable(func(ctx context.Context) error {
		return ipam.WatchAffinities(ctx, ds, gatedAffinities{guard, aff})
	}))
	goRun("datastore guard", guard.watch)
	goRun("bgp", speaker.Run)
	goRun("confd", cd.Run)
	goRun("node record keeper", func(ctx context.Context) error { return keeper.run(ctx, ds) })
	goRun("datastore sync", guard.restartable(func(ctx context.Context) error {
		return ds.Sync(ctx, feed.Kinds(), gatedFeed{guard, feed}, datastore.EndpointsOf(cfg.NodeName), datastore.WithBeat(beats.datastore))
	}))
	goRun("status socket", status.NewServer(cfg.StatusSocket, speaker).Run)
	addHealthChecks(health, ds, feed, speaker, fx, beats)
	health.AddReadiness("datastore identity", func(context.Context) (bool, string) {
		if frozen, why := guard.Frozen(); frozen {
			return false, "holding the dataplane and BGP as they are: " + why
		}
		return true, ""
	})
	if cfg.HealthAddr != "" {
		goRun("health server", func(ctx context.Context) error { return serveHTTP(ctx, cfg.HealthAddr, health.Handler()) })
	}
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		goRun("metrics server", func(ctx context.Context) error { return serveHTTP(ctx, cfg.MetricsAddr, mux) })
	}
	log.Info("routed running")

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: routes stay programmed and peers keep ours (graceful restart)")
	case runErr = <-errs:
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.ShutdownGrace):
		log.Warn("components did not stop in time")
	}
	return runErr
}

// nodeAddress is --ip when given, else the autodetected address; the
// same for --ip6, which is off ("none") unless set.
func nodeAddress(cfg Config) (Addresses, error) {
	var a Addresses
	if cfg.IP != "" && cfg.IP != "autodetect" {
		p, err := netip.ParsePrefix(cfg.IP)
		if err != nil || !p.Addr().Is4() {
			return a, fmt.Errorf("--ip %q: want an IPv4 address with prefix length, e.g. 10.0.0.5/24", cfg.IP)
		}
		a.V4 = p
	} else {
		p, err := DetectAddress(cfg.IPMethod)
		if err != nil {
			return a, err
		}
		a.V4 = p
	}
	switch cfg.IP6 {
	case "", "none":
	case "autodetect":
		p, err := DetectAddress6(cfg.IP6Method)
		if err != nil {
			return a, fmt.Errorf("--ip6 autodetect: %w", err)
		}
		a.V6 = p
	default:
		p, err := netip.ParsePrefix(cfg.IP6)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || p.Addr().IsLinkLocalUnicast() {
			return a, fmt.Errorf("--ip6 %q: want a global or unique-local IPv6 address with prefix length, e.g. fd00:10::5/64, autodetect or none", cfg.IP6)
		}
		a.V6 = p
	}
	return a, nil
}

// retry runs f until it succeeds, backing off up to 10 s, while ctx lasts.
func retry(ctx context.Context, what string, f func() error) error {
	backoff := 200 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !errors.Is(err, datastore.ErrUnavailable) {
			return fmt.Errorf("%s: %w", what, err)
		}
		log.WithError(err).Warnf("cannot %s yet; retrying", what)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// tunnelLoop keeps the node's tunnel address in line with the pools: it
// runs when kicked (a pool or this Node changed), retries failures with
// backoff, and otherwise re-checks only every tunnelRecheck.
func tunnelLoop(ctx context.Context, ds *datastore.Client, ic *ipam.Client, node string, kick <-chan struct{}, held func() bool) error {
	backoff := time.Second
	for {
		wait := tunnelRecheck
		if held() {
			wait = 3 * time.Second // write nothing into an untrusted datastore
		} else if err := EnsureTunnelAddress(ctx, ds, ic, node); err != nil && ctx.Err() == nil {
			log.WithError(err).Warn("tunnel address not settled; will retry")
			wait, backoff = backoff, min(backoff*2, 30*time.Second)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-time.After(wait):
		}
	}
}

// tunnelRecheck bounds how long a tunnel address missed through a lost
// event could stay wrong.
const tunnelRecheck = 10 * time.Minute

// gcLoop releases this node's empty blocks every period, and, on the one
// node elected for it, removes endpoints of deleted nodes and frees leaked
// allocations cluster-wide.
func gcLoop(ctx context.Context, ds *datastore.Client, ic *ipam.Client, cfg Config, held func() bool, gcLeading *atomic.Bool) error {
	go runAsLeader(ctx, ds, gcElection, cfg.NodeName, func(ctx context.Context, fence datastore.Fence) {
		gcLeading.Store(true)
		defer gcLeading.Store(false)
		every(ctx, cfg.IPAMGCPeriod, func() {
			if !held() {
				clusterGC(ctx, ds, fence, cfg.IPAMGCGrace)
			}
		})
	})
	every(ctx, cfg.IPAMGCPeriod, func() {
		if held() {
			return
		}
		if _, err := ic.ReleaseEmptyBlocks(ctx, cfg.NodeName); err != nil {
			log.WithError(err).Warn("releasing empty blocks failed")
		}
	})
	return nil
}

// every runs f each period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// serveHTTP serves h on addr until ctx ends.
func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
