package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
)

// ErrLostLeadership is returned by Run when another replica took the
// Lease: the process exits and its restart resyncs from scratch.
var ErrLostLeadership = errors.New("controllers: lost leadership")

// Config is how Run reaches Kubernetes and the datastore, and how it
// elects a leader.
type Config struct {
	Kube  kubernetes.Interface
	Store Store
	// NetworkPolicyAPI, when set, is how ClusterNetworkPolicies
	// (sigs.k8s.io/network-policy-api v1beta1) are watched; nil leaves
	// them, and what was written for them, alone.
	NetworkPolicyAPI npclient.Interface
	// LeaseNamespace and LeaseName name the Lease replicas compete for
	// (default "kube-system" and "routed-controllers").
	LeaseNamespace, LeaseName string
	// Identity is this replica in the Lease (default: the host name).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// leader election timings (default 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Resync is how often everything is compared again (default 5 min).
	Resync time.Duration
	// AutoHostEndpoints is Calico's autoCreate: a "*" HostEndpoint
	// "<node>-auto-hep" per Kubernetes node with the allow-all profile
	// projectcalico-default-allow (hostendpoint.go). Off, those the
	// controllers wrote are removed.
	AutoHostEndpoints bool
	// WatchDog, when set, is told of the leader election: its Check
	// (the liveness probe's /livez) fails once this replica leads but
	// has not renewed the Lease for its duration plus the adaptor's
	// timeout, a stuck process client-go's own exit did not end.
	WatchDog *leaderelection.HealthzAdaptor
}

func (c *Config) defaults() error {
	if c.Kube == nil || c.Store == nil {
		return errors.New("controllers: Config.Kube and Config.Store are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.LeaseDuration, 15*time.Second)
	def(&c.RenewDeadline, 10*time.Second)
	def(&c.RetryPeriod, 2*time.Second)
	def(&c.Resync, 5*time.Minute)
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = "kube-system"
	}
	if c.LeaseName == "" {
		c.LeaseName = "routed-controllers"
	}
	if c.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("controllers: no identity for the Lease: %w", err)
		}
		c.Identity = h
	}
	return nil
}

// Run competes for the Lease and, while it leads, keeps the datastore in
// line with Kubernetes. It returns nil when ctx ends (releasing the
// Lease) and ErrLostLeadership when leadership is lost otherwise.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: cfg.LeaseName},
		Client:     cfg.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	var leadErr error
	led := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.LeaseName,
		WatchDog:        cfg.WatchDog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				led = true
				log.WithField("identity", cfg.Identity).Info("became leader")
				leadErr = lead(lctx, cfg)
			},
			OnStoppedLeading: func() { log.WithField("identity", cfg.Identity).Info("stopped leading") },
			OnNewLeader: func(id string) {
				if id != cfg.Identity {
					log.WithField("leader", id).Info("another replica leads")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("controllers: leader election: %w", err)
	}
	le.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if leadErr != nil && !errors.Is(leadErr, context.Canceled) {
		return leadErr
	}
	if led {
		return ErrLostLeadership
	}
	return nil
}

// lead runs one term of leadership with fresh state: a new leader
// starts from a full resync.
func lead(ctx context.Context, cfg Config) error {
	recorder, stop := newRecorder(ctx, cfg.Kube)
	defer stop()
	s := &syncer{
		kube:     cfg.Kube,
		store:    cfg.Store,
		recorder: recorder,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		resync:   cfg.Resync,
		reported: map[string]string{},
	}
	if cfg.NetworkPolicyAPI != nil {
		s.cnps = &cnpWatch{client: cfg.NetworkPolicyAPI}
	}
	s.weps = newWEPIndex(func(k string) { s.queue.Add(k) })
	go func() {
		if err := s.autoHostEndpoints(ctx, cfg.AutoHostEndpoints); err != nil && ctx.Err() == nil {
			log.WithError(err).Error("automatic host endpoints stopped")
		}
	}()
	return s.lead(ctx)
}
