// Package controllers is routed's equivalent of calico-kube-controllers
// in etcd mode: it watches Kubernetes (namespaces, service accounts,
// pods, NetworkPolicies) through client-go informers and keeps what they
// imply in routed's datastore. One replica at a time leads (a Lease);
// the leader resyncs everything when it starts, so objects changed or
// deleted while no controller ran converge.
//
// It writes namespace and service-account profiles (kns.<ns>,
// ksa.<ns>.<sa>), the labels, profiles, service account and named ports
// of each pod's WorkloadEndpoint, a NetworkPolicy "knp.default.<name>"
// per Kubernetes NetworkPolicy, and a GlobalNetworkPolicy
// "kcnp.kube-admin.<name>" or "kcnp.kube-baseline.<name>" per
// ClusterNetworkPolicy (sigs.k8s.io/network-policy-api v1beta1). Profiles and policies it writes carry
// OwnerAnnotation; nothing without it is ever changed or deleted.
package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	npv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

var log = logrus.WithField("component", "controllers")

// Store is what the controllers need of routed's datastore
// (*datastore.Client).
type Store interface {
	Get(ctx context.Context, k api.Kind, name string) (api.Resource, error)
	List(ctx context.Context, k api.Kind) ([]api.Resource, int64, error)
	Create(ctx context.Context, r api.Resource) (api.Resource, error)
	Update(ctx context.Context, r api.Resource) (api.Resource, error)
	Delete(ctx context.Context, k api.Kind, name, resourceVersion string) error
	Stream(ctx context.Context, prefix string, h datastore.StreamHandler, o datastore.StreamOptions) error
}

// Work-queue keys: "<kind>|<namespace>/<name>" (namespace empty for
// namespaces).
const (
	keyNamespace = "ns"
	keySA        = "sa"
	keyPod       = "pod"
	keyPolicy    = "np"
)

// EventReasonNotExact is the reason of the Warning event recorded on a
// NetworkPolicy that routed enforces more strictly than written.
const EventReasonNotExact = "PolicyNotExact"

// syncer converts while leading: one worker goroutine owns reported.
type syncer struct {
	kube     kubernetes.Interface
	store    Store
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[string]
	weps     *wepIndex
	resync   time.Duration

	namespaces cache.Indexer
	sas        cache.Indexer
	pods       cache.Indexer
	policies   cache.Indexer
	// cnps is nil when no ClusterNetworkPolicy client was configured.
	cnps *cnpWatch
	// svc resolves the Services rules name (service.go).
	svc *serviceWatch

	// reported holds the last problems recorded per policy key, so an
	// unchanged policy is not reported again on every resync.
	reported map[string]string
}

// lead runs the controllers until ctx ends: informers, the endpoint
// index, a full resync of what was written before, and the worker.
func (s *syncer) lead(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(s.kube, 0)
	inf := map[string]cache.SharedIndexInformer{
		keyNamespace: f.Core().V1().Namespaces().Informer(),
		keySA:        f.Core().V1().ServiceAccounts().Informer(),
		keyPod:       f.Core().V1().Pods().Informer(),
		keyPolicy:    f.Networking().V1().NetworkPolicies().Informer(),
	}
	for kind, i := range inf {
		kind := kind
		if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { s.enqueueObj(kind, o) },
			UpdateFunc: func(_, o any) { s.enqueueObj(kind, o) },
			DeleteFunc: func(o any) { s.enqueueObj(kind, o) },
		}); err != nil {
			return err
		}
	}
	s.namespaces, s.sas, s.pods, s.policies = inf[keyNamespace].GetIndexer(), inf[keySA].GetIndexer(), inf[keyPod].GetIndexer(), inf[keyPolicy].GetIndexer()
	if err := s.watchServices(f); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	for kind, i := range inf {
		if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			return fmt.Errorf("controllers: %s informer did not sync: %w", kind, ctx.Err())
		}
	}
	if err := s.startServices(ctx); err != nil {
		return err
	}
	go func() {
		if err := s.store.Stream(ctx, datastore.KindPrefix(api.KindWorkloadEndpoint), s.weps, datastore.StreamOptions{}); err != nil && ctx.Err() == nil {
			log.WithError(err).Error("WorkloadEndpoint watch ended")
		}
	}()
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	if s.cnps != nil {
		go s.cnps.run(ctx, func(o any) { s.enqueueObj(keyCNP, o) }, func() {
			if err := s.resyncOnce(ctx); err != nil {
				log.WithError(err).Warn("resync after the ClusterNetworkPolicy informer synced incomplete")
			}
		})
	}
	go s.resyncLoop(ctx)
	log.Info("leading: informers synced, resyncing")
	for s.processNext(ctx) {
	}
	return ctx.Err()
}

// resyncLoop enqueues everything now and every resync interval: every
// Kubernetes object, and everything the controllers wrote earlier (so
// what was written for deleted objects is removed).
func (s *syncer) resyncLoop(ctx context.Context) {
	failures := backoff.New(2*time.Second, time.Minute)
	for {
		if err := s.resyncOnce(ctx); err != nil {
			log.WithError(err).Warn("resync incomplete; retrying")
			if !failures.Wait(ctx) {
				return
			}
			continue
		}
		failures.Reset()
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.resync):
		}
	}
}

func (s *syncer) resyncOnce(ctx context.Context) error {
	for kind, idx := range map[string]cache.Indexer{keyNamespace: s.namespaces, keySA: s.sas, keyPod: s.pods, keyPolicy: s.policies} {
		for _, k := range idx.ListKeys() {
			s.queue.Add(kind + "|" + k)
		}
	}
	for _, k := range s.cnps.keys() {
		s.queue.Add(keyCNP + "|" + k)
	}
	kinds := []api.Kind{api.KindProfile, api.KindNetworkPolicy}
	if s.cnps.synced() {
		// Only once the informer has synced: before, a missing
		// ClusterNetworkPolicy is not known to be gone.
		kinds = append(kinds, api.KindGlobalNetworkPolicy)
	}
	for _, kind := range kinds {
		list, _, err := s.store.List(ctx, kind)
		if err != nil {
			return fmt.Errorf("list %s: %w", kind.Plural(), err)
		}
		for _, r := range list {
			if !IsOwned(r) {
				continue
			}
			src := r.Meta().Annotations[SourceAnnotation]
			switch {
			case kind == api.KindGlobalNetworkPolicy:
				if src, ok := cnpSource(r); ok {
					s.queue.Add(keyCNP + "|" + src)
				}
			case kind == api.KindNetworkPolicy:
				s.queue.Add(keyPolicy + "|" + src)
			case strings.HasPrefix(r.Meta().Name, api.NamespaceProfilePrefix):
				s.queue.Add(keyNamespace + "|" + src)
			case strings.HasPrefix(r.Meta().Name, api.ServiceAccountProfilePrefix):
				s.queue.Add(keySA + "|" + src)
			}
		}
	}
	return s.resyncServices(ctx)
}

func (s *syncer) enqueueObj(kind string, o any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
	if err != nil {
		log.WithError(err).Warn("object without a key")
		return
	}
	s.queue.Add(kind + "|" + key)
}

func (s *syncer) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil {
		if ctx.Err() != nil {
			return false
		}
		log.WithError(err).WithField("key", key).Warn("sync failed; retrying")
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

// sync makes the datastore match one Kubernetes object (or its absence).
func (s *syncer) sync(ctx context.Context, key string) error {
	kind, nsName, _ := strings.Cut(key, "|")
	ns, name, _ := strings.Cut(nsName, "/")
	if name == "" {
		ns, name = "", ns
	}
	switch kind {
	case keyNamespace:
		o, ok, err := s.namespaces.GetByKey(nsName)
		if err != nil {
			return err
		}
		if !ok {
			return s.deleteOwned(ctx, api.KindProfile, api.NamespaceProfilePrefix+name)
		}
		return s.ensure(ctx, NamespaceProfile(o.(*corev1.Namespace)))
	case keySA:
		o, ok, err := s.sas.GetByKey(nsName)
		if err != nil {
			return err
		}
		if !ok {
			return s.deleteOwned(ctx, api.KindProfile, ServiceAccountProfileName(ns, name))
		}
		return s.ensure(ctx, ServiceAccountProfile(o.(*corev1.ServiceAccount)))
	case keyPolicy:
		o, ok, err := s.policies.GetByKey(nsName)
		if err != nil {
			return err
		}
		if !ok {
			delete(s.reported, nsName)
			return s.deleteOwned(ctx, api.KindNetworkPolicy, api.NamespacedName(api.KindNetworkPolicy, ns, PolicyName(name)))
		}
		np := o.(*networkingv1.NetworkPolicy)
		c := ConvertNetworkPolicy(np)
		s.report(nsName, np, c.Problems)
		return s.ensure(ctx, c.Policy)
	case keyCNP:
		return s.syncCNP(ctx, name)
	case keyService:
		return s.syncService(ctx, ns, name)
	case keyPod:
		o, ok, err := s.pods.GetByKey(nsName)
		if err != nil || !ok {
			return err // a deleted pod's endpoint goes with CNI DEL
		}
		return s.syncPod(ctx, o.(*corev1.Pod))
	}
	return fmt.Errorf("controllers: unknown key %q", key)
}

// report records problems of a policy once per distinct set: a Warning
// event on the NetworkPolicy and a log line each.
func (s *syncer) report(key string, np *networkingv1.NetworkPolicy, problems []string) {
	joined := strings.Join(problems, "\n")
	if s.reported[key] == joined {
		return
	}
	s.reported[key] = joined
	for _, p := range problems {
		log.WithField("networkpolicy", key).Warn("enforced more strictly than written: " + p)
		s.recorder.Event(np, corev1.EventTypeWarning, EventReasonNotExact, "routed enforces this policy more strictly than written: "+p)
	}
}

// syncPod brings every endpoint of the pod in line with it.
func (s *syncer) syncPod(ctx context.Context, pod *corev1.Pod) error {
	var errs []error
	for _, name := range s.weps.of(pod.Namespace, pod.Name) {
		r, err := s.store.Get(ctx, api.KindWorkloadEndpoint, name)
		if datastore.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		wep := r.(*api.WorkloadEndpoint)
		if wep.Spec.Namespace != pod.Namespace || wep.Spec.Pod != pod.Name {
			continue
		}
		if upd, changed := PodEndpoint(wep, pod); changed {
			if _, err := s.store.Update(ctx, upd); err != nil {
				errs = append(errs, fmt.Errorf("update WorkloadEndpoint %s: %w", name, err))
				continue
			}
			log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "endpoint": name}).Debug("endpoint updated from its pod")
		}
	}
	return errors.Join(errs...)
}

// ensure writes want unless the stored object already says the same; an
// object of the same name that the controllers did not write is left
// alone.
func (s *syncer) ensure(ctx context.Context, want api.Resource) error {
	return s.ensureAdopting(ctx, want, nil)
}

// ensureAdopting is ensure with adopt (when not nil) deciding about
// the stored object before anything is written over it: it sees the
// stored object and want (which it may mark) and returns false to leave
// the stored object as it is (saying why is then its job). Without
// adopt, only what the controllers wrote is written over.
func (s *syncer) ensureAdopting(ctx context.Context, want api.Resource, adopt func(cur, want api.Resource) bool) error {
	kind, name := want.GetKind(), api.StoreName(want)
	cur, err := s.store.Get(ctx, kind, name)
	if datastore.IsNotFound(err) {
		_, err = s.store.Create(ctx, want)
		if err == nil {
			log.WithFields(logrus.Fields{"kind": kind, "name": name}).Info("created")
		}
		return err
	}
	if err != nil {
		return err
	}
	if adopt != nil {
		if !adopt(cur, want) {
			return nil
		}
	} else if !IsOwned(cur) {
		log.WithFields(logrus.Fields{"kind": kind, "name": name}).Warn("an object of this name was not written by the controllers; leaving it alone")
		return nil
	}
	m := want.Meta()
	m.ResourceVersion, m.CreationTimestamp, m.UID = cur.Meta().ResourceVersion, cur.Meta().CreationTimestamp, cur.Meta().UID
	api.SetDefaults(want)
	if same(cur, want) {
		return nil
	}
	if _, err := s.store.Update(ctx, want); err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"kind": kind, "name": name}).Info("updated")
	return nil
}

func same(a, b api.Resource) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// deleteOwned removes what the controllers wrote under name; missing is
// done, and an object someone else wrote is never deleted.
func (s *syncer) deleteOwned(ctx context.Context, kind api.Kind, name string) error {
	return s.deleteAdopting(ctx, kind, name, nil)
}

// deleteAdopting is deleteOwned that also removes a stored object adopt
// (when not nil) accepts although the controllers did not write it.
func (s *syncer) deleteAdopting(ctx context.Context, kind api.Kind, name string, adopt func(api.Resource) bool) error {
	cur, err := s.store.Get(ctx, kind, name)
	if datastore.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !IsOwned(cur) && (adopt == nil || !adopt(cur)) {
		return nil
	}
	err = s.store.Delete(ctx, kind, name, cur.Meta().ResourceVersion)
	if err == nil {
		log.WithFields(logrus.Fields{"kind": kind, "name": name}).Info("deleted: its Kubernetes object is gone")
	}
	if datastore.IsNotFound(err) {
		return nil
	}
	return err
}

// wepIndex maps pods to the names of their WorkloadEndpoints, fed by a
// datastore watch; a change to an endpoint enqueues its pod, so an
// endpoint the CNI plugin writes after the pod's last event still gets
// the pod's labels.
type wepIndex struct {
	enqueue func(key string)

	mu    sync.Mutex
	byPod map[string]map[string]bool // "<ns>/<pod>" -> endpoint names
	podOf map[string]string          // endpoint name -> "<ns>/<pod>"
}

func newWEPIndex(enqueue func(string)) *wepIndex {
	return &wepIndex{enqueue: enqueue, byPod: map[string]map[string]bool{}, podOf: map[string]string{}}
}

func (x *wepIndex) of(ns, pod string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	for n := range x.byPod[ns+"/"+pod] {
		out = append(out, n)
	}
	return out
}

// OnList implements datastore.StreamHandler.
func (x *wepIndex) OnList(kvs []*mvccpb.KeyValue, rev int64, _ datastore.ListReason) {
	x.mu.Lock()
	x.byPod, x.podOf = map[string]map[string]bool{}, map[string]string{}
	var pods []string
	for _, kv := range kvs {
		if w := decodeWEP(kv.Key, kv.Value, kv.ModRevision); w != nil {
			if p := x.setLocked(w); p != "" {
				pods = append(pods, p)
			}
		}
	}
	x.mu.Unlock()
	for _, p := range pods {
		x.enqueue(keyPod + "|" + p)
	}
}

// OnEvents implements datastore.StreamHandler.
func (x *wepIndex) OnEvents(evs []*clientv3.Event, _ int64) {
	var pods []string
	x.mu.Lock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypeDelete {
			_, name, _ := datastore.ParseKey(string(ev.Kv.Key))
			if p, ok := x.podOf[name]; ok {
				delete(x.byPod[p], name)
				if len(x.byPod[p]) == 0 {
					delete(x.byPod, p)
				}
				delete(x.podOf, name)
			}
			continue
		}
		if w := decodeWEP(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision); w != nil {
			if p := x.setLocked(w); p != "" {
				pods = append(pods, p)
			}
		}
	}
	x.mu.Unlock()
	for _, p := range pods {
		x.enqueue(keyPod + "|" + p)
	}
}

func decodeWEP(key, value []byte, rev int64) *api.WorkloadEndpoint {
	k, _, ok := datastore.ParseKey(string(key))
	if !ok || k != api.KindWorkloadEndpoint {
		return nil
	}
	r, err := datastore.Decode(k, value, rev)
	if err != nil {
		log.WithError(err).WithField("key", string(key)).Warn("unreadable WorkloadEndpoint")
		return nil
	}
	w, _ := r.(*api.WorkloadEndpoint)
	return w
}

func (x *wepIndex) setLocked(w *api.WorkloadEndpoint) string {
	if w.Spec.Pod == "" || w.Spec.Orchestrator != "k8s" {
		return ""
	}
	p := w.Spec.Namespace + "/" + w.Spec.Pod
	if old, ok := x.podOf[w.Metadata.Name]; ok && old != p {
		delete(x.byPod[old], w.Metadata.Name)
	}
	if x.byPod[p] == nil {
		x.byPod[p] = map[string]bool{}
	}
	x.byPod[p][w.Metadata.Name] = true
	x.podOf[w.Metadata.Name] = p
	return p
}

// newRecorder records events through the API server as component.
func newRecorder(ctx context.Context, kube kubernetes.Interface) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	sch := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(sch))
	utilruntime.Must(npv1beta1.Install(sch))
	return b.NewRecorder(sch, corev1.EventSource{Component: "routed-controllers"}), b.Shutdown
}
