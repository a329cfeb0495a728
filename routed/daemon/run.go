package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/atomicfile"
	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/internal/supervise"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/autodetect"
	"github.com/routed-net/routed/routed/identity"
	"github.com/routed-net/routed/routed/noderecord"
)

// Run starts the daemon and blocks until ctx ends (SIGTERM). On the way
// out nothing is flushed: routes stay in the kernel and BGP sessions are
// dropped without a Cease, so peers keep this node's routes (graceful
// restart) and pods keep forwarding while routed restarts.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	lvl, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logrus.SetLevel(lvl)
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
	ds, err := datastore.New(cfg.Datastore)
	if err != nil {
		return err
	}
	defer ds.Close()
	versionCtx, stopVersions := context.WithCancel(ctx)
	defer stopVersions()
	go checkEtcdVersions(versionCtx, ds, log)
	addr, err := nodeAddress(cfg)
	if err != nil {
		return err
	}
	log = log.WithField("address", addr.V4)
	if addr.V6.IsValid() {
		log = log.WithField("address6", addr.V6)
	}
	guard, err := register(ctx, ds, cfg, addr, log)
	if err != nil {
		return err
	}
	defer guard.Save()
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir %s: %w", cfg.StateDir, err)
	}
	if err := atomicfile.Write(filepath.Join(cfg.StateDir, "nodename"), []byte(cfg.NodeName), 0o644); err != nil {
		return fmt.Errorf("state dir %s: %w", cfg.StateDir, err)
	}

	// The start-up list and the first programming run with a lower
	// GOGC, put back once in sync (heaprelease.go).
	restoreGC := lowerGCForStart()
	defer restoreGC()
	n, err := build(cfg, ds, guard, addr)
	if err != nil {
		return err
	}
	// Then the steady GOGC follows the live heap (gctune.go).
	n.restoreGC = func() { restoreGC(); tuneGC() }
	g := supervise.New(ctx, log)
	n.start(g, cfg)
	log.Info("routed running")
	err = g.Wait(cfg.ShutdownGrace)
	if err == nil {
		log.Info("stopped: routes stay programmed and peers keep ours (graceful restart)")
	}
	return err
}

// register checks the datastore's identity and, when it is trusted,
// writes this node's Node record and the default pools. etcd may come up
// after us (DaemonSet start order): it keeps trying until ctx ends.
func register(ctx context.Context, ds *datastore.Client, cfg Config, addr noderecord.Addresses, log *logrus.Entry) (*identity.Guard, error) {
	guard := identity.New(ds, cfg.StateDir)
	if err := retry(ctx, "read the cluster identity", func() error { return guard.Start(ctx) }); err != nil {
		return nil, err
	}
	if frozen, why := guard.Frozen(); frozen {
		// Write nothing into a datastore we do not trust: the node
		// registers once it is restored or re-initialised (the keeper).
		log.WithField("reason", why).Error("not registering: the datastore is not the one this node knows")
		return guard, nil
	}
	if err := retry(ctx, "register the node", func() error {
		_, err := noderecord.Register(ctx, ds, cfg.NodeName, addr)
		return err
	}); err != nil {
		return nil, err
	}
	if err := noderecord.EnsureDefaultPool(ctx, ds, cfg.Pool); err != nil {
		log.WithError(err).Warn("could not create the default pool")
	}
	// felix enforces the three tiers even before they are stored; stored,
	// routedctl shows them and refuses policies in tiers that do not exist.
	if err := ds.EnsureDefaultTiers(ctx); err != nil {
		log.WithError(err).Warn("could not create the default tiers")
	}
	return guard, nil
}

// retry runs f until it succeeds, backing off up to 10 s, while ctx
// lasts; only an unreachable datastore is worth retrying.
func retry(ctx context.Context, what string, f func() error) error {
	err := backoff.Retry(ctx, 200*time.Millisecond, 10*time.Second, func(err error) bool {
		if !errors.Is(err, datastore.ErrUnavailable) {
			return false
		}
		log.WithError(err).Warnf("cannot %s yet; retrying", what)
		return true
	}, f)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// nodeAddress is --ip when given, else the autodetected address; the
// same for --ip6, which is off ("none") unless set.
func nodeAddress(cfg Config) (noderecord.Addresses, error) {
	var a noderecord.Addresses
	if cfg.IP != "" && cfg.IP != "autodetect" {
		p, err := netip.ParsePrefix(cfg.IP)
		if err != nil || !p.Addr().Is4() {
			return a, fmt.Errorf("--ip %q: want an IPv4 address with prefix length, e.g. 10.0.0.5/24", cfg.IP)
		}
		a.V4 = p
	} else {
		p, err := autodetect.Address(cfg.IPMethod)
		if err != nil {
			return a, err
		}
		a.V4 = p
	}
	switch cfg.IP6 {
	case "", "none":
	case "autodetect":
		p, err := autodetect.Address6(cfg.IP6Method)
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
