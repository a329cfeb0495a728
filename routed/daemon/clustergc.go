package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/routed-net/routed/internal/supervise"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/gc"
)

// ClusterGCConfig is `routed cluster-gc`'s: the cluster-wide GC pass in a
// process of its own (what calico-kube-controllers' node controller
// does), so that the nodes, run with --cluster-gc=false, never hold the
// pass's read of every block.
type ClusterGCConfig struct {
	Datastore   datastore.Config
	Name        string // this candidate in the election
	Period      time.Duration
	Grace       time.Duration
	MetricsAddr string
	LogLevel    string
}

// BindFlags registers the flags, with defaults from the environment.
func (c *ClusterGCConfig) BindFlags(fs *pflag.FlagSet) {
	c.Datastore.BindFlags(fs)
	host, _ := os.Hostname()
	fs.StringVar(&c.Name, "name", env(host, "POD_NAME"), "this process in the GC election, shown as the leader (env POD_NAME; default the host name)")
	fs.DurationVar(&c.Period, "ipam-gc-interval", 5*time.Minute, "how often the cluster-wide pass runs")
	fs.DurationVar(&c.Grace, "ipam-gc-grace", 10*time.Minute, "how old a leak must be, and how long a node must have been gone, before GC frees it")
	fs.StringVar(&c.MetricsAddr, "metrics-listen", env("", "ROUTED_METRICS_LISTEN"), "address for Prometheus /metrics (the pass's findings and the cluster's IPAM usage while elected) and the liveness probe's /livez (empty: off) (env ROUTED_METRICS_LISTEN)")
	fs.StringVar(&c.LogLevel, "log-level", env("info", "ROUTED_LOG_LEVEL"), "trace, debug, info, warning, error (env ROUTED_LOG_LEVEL)")
}

// Validate reports a configuration that cannot run.
func (c *ClusterGCConfig) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("--name: empty (and no POD_NAME or host name)"))
	}
	if c.Period <= 0 {
		errs = append(errs, fmt.Errorf("--ipam-gc-interval %v: must be positive (this process does nothing else)", c.Period))
	}
	if c.Grace < 0 {
		errs = append(errs, fmt.Errorf("--ipam-gc-grace %v: must not be negative", c.Grace))
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	return errors.Join(errs...)
}

// ClusterGCLiveWithin is how long /livez allows since the datastore
// trust check last finished: two of its 10 s periods, each with its
// 10 s read, and room for a loaded node.
const ClusterGCLiveWithin = 60 * time.Second

// RunClusterGC runs for the cluster GC election and, while elected, the
// cluster-wide pass, until ctx ends.
func RunClusterGC(ctx context.Context, cfg ClusterGCConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	lvl, _ := logrus.ParseLevel(cfg.LogLevel)
	logrus.SetLevel(lvl)
	ds, err := datastore.New(cfg.Datastore)
	if err != nil {
		return err
	}
	defer ds.Close()
	ic := ipam.New(ds)
	var leading atomic.Bool
	gm := gc.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(gm.Collectors()...)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "routed_cluster_gc_leading",
		Help: "1 while this process is the elected cluster GC process, else 0."}, func() float64 {
		if leading.Load() {
			return 1
		}
		return 0
	}))
	// The cluster's usage, by the elected process only: without a feed's
	// block tallies it reads every block, so at most once a GC period.
	reg.MustRegister(ipam.NewCollector(ic, 5*time.Second).UsageWhen(leading.Load).UsageEvery(cfg.Period))
	trust := gc.NewTrust(ctx, ds)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "routed_cluster_gc_held",
		Help: "1 while this process would write nothing because it does not trust the datastore (no identity, not ready, another cluster's, or gone back in time; the log says which), else 0. Every replica judges, elected or not."}, func() float64 {
		if trust.Reason() != "" {
			return 1
		}
		return 0
	}))
	log.WithFields(logrus.Fields{"name": cfg.Name, "interval": cfg.Period, "grace": cfg.Grace}).Info("routed cluster-gc: running for the cluster GC election")

	g := supervise.New(ctx, log.WithField("role", "cluster-gc"))
	g.Go("datastore trust", supervise.Fatal, func(ctx context.Context) error {
		trust.Run(ctx, 10*time.Second)
		return nil
	})
	g.Go("cluster gc", supervise.Fatal, func(ctx context.Context) error {
		return gc.Run(ctx, gc.Config{DS: ds, IPAM: ic, Cluster: true, Name: cfg.Name, Period: cfg.Period,
			Grace: cfg.Grace, Held: trust.Held, Leading: &leading, Metrics: gm})
	})
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		// The liveness probe's (deploy/base/cluster-gc.yaml): the
		// trust check runs every 10 s, each read bounded by 10 s.
		mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
			if err := trust.Alive(ClusterGCLiveWithin); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		g.Go("metrics server", supervise.Fatal, func(ctx context.Context) error { return serveHTTP(ctx, cfg.MetricsAddr, mux) })
	}
	return g.Wait(10 * time.Second)
}
