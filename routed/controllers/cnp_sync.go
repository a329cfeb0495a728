package controllers

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	npv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	npinformers "sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/api"
)

// keyCNP is the work-queue kind of ClusterNetworkPolicies.
const keyCNP = "cnp"

// cnpPollInterval is how often a leader that found no
// ClusterNetworkPolicy API looks again (its CRD may be installed later).
const cnpPollInterval = 30 * time.Second

// cnpWatch watches ClusterNetworkPolicies once their API is served. Until
// then indexer is nil and nothing written for them is changed: the API
// missing for a moment (a CRD being upgraded, discovery not caught up)
// must not delete the admin tier's Deny rules.
type cnpWatch struct {
	client  npclient.Interface
	indexer atomic.Pointer[cache.Indexer]
}

// served reports whether the API server serves ClusterNetworkPolicy
// v1beta1; an error other than "not found" is returned as is.
func (w *cnpWatch) served() (bool, error) {
	list, err := w.client.Discovery().ServerResourcesForGroupVersion(npv1beta1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == "clusternetworkpolicies" {
			return true, nil
		}
	}
	return false, nil
}

// run waits until the API is served, starts the informer, and from its
// first sync enqueues every change; it returns when ctx ends.
func (w *cnpWatch) run(ctx context.Context, enqueue func(o any), synced func()) {
	// A fixed pace (floor = ceiling): the CRD may come at any time, and
	// a cluster without it is normal, not a failure to back off from.
	poll := backoff.New(cnpPollInterval, cnpPollInterval)
	warned := false
	for {
		ok, err := w.served()
		if ok {
			break
		}
		switch {
		case err != nil:
			log.WithError(err).Warn("cannot tell whether ClusterNetworkPolicy is served; asking again")
		case !warned:
			// Once: a cluster without the CRD is a normal cluster.
			warned = true
			log.Warnf("ClusterNetworkPolicy %s is not served (CRD not installed?); looking again every %s", npv1beta1.GroupVersion, cnpPollInterval)
		}
		if !poll.Wait(ctx) {
			return
		}
	}
	f := npinformers.NewSharedInformerFactory(w.client, 0)
	inf := f.Policy().V1beta1().ClusterNetworkPolicies().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: enqueue,
	}); err != nil {
		log.WithError(err).Error("ClusterNetworkPolicy informer")
		return
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	idx := inf.GetIndexer()
	w.indexer.Store(&idx)
	log.Info("watching ClusterNetworkPolicies")
	synced()
	<-ctx.Done()
}

// get returns the ClusterNetworkPolicy name; known is false while the
// informer has not synced.
func (w *cnpWatch) get(name string) (cnp *npv1beta1.ClusterNetworkPolicy, known bool, err error) {
	if w == nil {
		return nil, false, nil
	}
	idx := w.indexer.Load()
	if idx == nil {
		return nil, false, nil
	}
	o, ok, err := (*idx).GetByKey(name)
	if err != nil || !ok {
		return nil, err == nil, err
	}
	return o.(*npv1beta1.ClusterNetworkPolicy), true, nil
}

// synced reports whether the informer has synced.
func (w *cnpWatch) synced() bool { return w != nil && w.indexer.Load() != nil }

// keys lists every ClusterNetworkPolicy known (none before the sync).
func (w *cnpWatch) keys() []string {
	if w == nil {
		return nil
	}
	if idx := w.indexer.Load(); idx != nil {
		return (*idx).ListKeys()
	}
	return nil
}

// syncCNP makes the datastore match ClusterNetworkPolicy name: its
// GlobalNetworkPolicy in its tier written, the one of the other tier
// (the policy changed tier) and both of a deleted policy removed.
func (s *syncer) syncCNP(ctx context.Context, name string) error {
	cnp, known, err := s.cnps.get(name)
	if err != nil || !known {
		return err
	}
	admin, baseline := CNPName(npv1beta1.AdminTier, name), CNPName(npv1beta1.BaselineTier, name)
	if cnp == nil {
		delete(s.reported, keyCNP+"|"+name)
		if err := s.deleteOwned(ctx, api.KindGlobalNetworkPolicy, admin); err != nil {
			return err
		}
		return s.deleteOwned(ctx, api.KindGlobalNetworkPolicy, baseline)
	}
	c := ConvertClusterNetworkPolicy(cnp)
	s.reportCNP(cnp, c.Problems)
	if err := s.ensure(ctx, c.Policy); err != nil {
		return err
	}
	other := baseline
	if c.Policy.Metadata.Name == baseline {
		other = admin
	}
	return s.deleteOwned(ctx, api.KindGlobalNetworkPolicy, other)
}

// reportCNP records problems of a ClusterNetworkPolicy once per
// distinct set, as report does for NetworkPolicies.
func (s *syncer) reportCNP(cnp *npv1beta1.ClusterNetworkPolicy, problems []string) {
	key := keyCNP + "|" + cnp.Name
	joined := strings.Join(problems, "\n")
	if s.reported[key] == joined {
		return
	}
	s.reported[key] = joined
	for _, p := range problems {
		log.WithField("clusternetworkpolicy", cnp.Name).Warn("enforced more strictly than written: " + p)
		s.recorder.Event(cnp, corev1.EventTypeWarning, EventReasonNotExact, "routed enforces this policy more strictly than written: "+p)
	}
}

// cnpSource returns the ClusterNetworkPolicy an owned GlobalNetworkPolicy
// was written for, if it is one of those.
func cnpSource(r api.Resource) (string, bool) {
	n := r.Meta().Name
	if !strings.HasPrefix(n, CNPAdminPrefix) && !strings.HasPrefix(n, CNPBaselinePrefix) {
		return "", false
	}
	src := r.Meta().Annotations[SourceAnnotation]
	return src, src != ""
}
