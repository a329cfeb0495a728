package controllers

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Service rules: the controllers resolve each Service that a rule
// (enforced or staged) names (services: {name, namespace}) into a
// ServiceEndpoints record, "<namespace>.<name>", and keep it equal to
// the Service's EndpointSlices (discovery.k8s.io/v1): every endpoint a
// slice lists, grouped by the slice's ports. A Service no rule names has no record,
// and the record goes when the last rule naming it or the Service's
// last EndpointSlice (the Service) goes.
//
// Which endpoints: all that the slices list, ready or not, as Calico's
// felix does: a Service's membership is its pods', not their readiness
// (kube-proxy already sends new connections to ready ones only), so a
// Deny naming the Service also covers a pod that is starting or
// terminating, and an Allow does not flap with readiness probes.

// keyService is the work-queue kind of a Service ("svc|<ns>/<name>").
const keyService = "svc"

// serviceNameIndex indexes EndpointSlices by "<ns>/<service>".
const serviceNameIndex = "service"

// serviceWatch is the EndpointSlice informer and the index of Services
// named by rules.
type serviceWatch struct {
	slices cache.SharedIndexInformer
	refs   *serviceRefs
}

// watchServices registers the EndpointSlice informer on f (before f
// starts) and the reference index.
func (s *syncer) watchServices(f informers.SharedInformerFactory) error {
	w := &serviceWatch{slices: f.Discovery().V1().EndpointSlices().Informer()}
	w.refs = newServiceRefs(func(svc string) { s.queue.Add(keyService + "|" + svc) }, nil)
	// The cache keeps of each slice only what a record needs: a big
	// cluster has tens of thousands of slices.
	if err := w.slices.SetTransform(trimSlice); err != nil {
		return err
	}
	if err := w.slices.AddIndexers(cache.Indexers{serviceNameIndex: func(o any) ([]string, error) {
		if svc := sliceService(o); svc != "" {
			return []string{svc}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	enqueue := func(o any) {
		// Only Services a rule names: every other slice change costs
		// nothing but the cache update.
		if svc := sliceService(o); svc != "" && w.refs.named(svc) {
			s.queue.Add(keyService + "|" + svc)
		}
	}
	if _, err := w.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, o any) {
			// A slice moved to another Service leaves the first's
			// record too.
			if sliceService(old) != sliceService(o) {
				enqueue(old)
			}
			enqueue(o)
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	s.svc = w
	return nil
}

// startServices waits for the EndpointSlice cache, then watches the
// rules that can name Services; once every kind is listed, the records
// are resynced (records of Services no longer named go).
func (s *syncer) startServices(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.svc.slices.HasSynced) {
		return fmt.Errorf("controllers: EndpointSlice informer did not sync: %w", ctx.Err())
	}
	s.svc.refs.onSynced = func() {
		if err := s.resyncServices(ctx); err != nil {
			log.WithError(err).Warn("ServiceEndpoints resync after the rules were listed incomplete")
		}
	}
	for _, k := range serviceRefKinds {
		go func() {
			if err := s.store.Stream(ctx, datastore.KindPrefix(k), s.svc.refs.handler(k), datastore.StreamOptions{}); err != nil && ctx.Err() == nil {
				log.WithError(err).WithField("kind", k).Error("watch of the rules naming Services ended")
			}
		}()
	}
	return nil
}

// resyncServices enqueues every named Service and every record the
// controllers wrote; nothing before the rules are listed (a record
// would look unneeded).
func (s *syncer) resyncServices(ctx context.Context) error {
	if s.svc == nil || !s.svc.refs.synced() {
		return nil
	}
	for _, svc := range s.svc.refs.all() {
		s.queue.Add(keyService + "|" + svc)
	}
	list, _, err := s.store.List(ctx, api.KindServiceEndpoints)
	if err != nil {
		return fmt.Errorf("list %s: %w", api.KindServiceEndpoints.Plural(), err)
	}
	for _, r := range list {
		if IsOwned(r) {
			s.queue.Add(keyService + "|" + r.Meta().Namespace + "/" + r.Meta().Name)
		}
	}
	return nil
}

// syncService makes the record of the Service ns/name match its
// EndpointSlices, or removes it when no rule names the Service or the
// Service has no slice.
func (s *syncer) syncService(ctx context.Context, ns, name string) error {
	svc := ns + "/" + name
	if !s.svc.refs.synced() {
		return nil // once listed, every named Service is enqueued
	}
	store := api.NamespacedName(api.KindServiceEndpoints, ns, name)
	if !s.svc.refs.named(svc) {
		return s.deleteOwned(ctx, api.KindServiceEndpoints, store)
	}
	objs, err := s.svc.slices.GetIndexer().ByIndex(serviceNameIndex, svc)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return s.deleteOwned(ctx, api.KindServiceEndpoints, store)
	}
	sl := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		sl = append(sl, o.(*discoveryv1.EndpointSlice))
	}
	return s.ensure(ctx, ServiceEndpointsFor(ns, name, sl))
}

// ServiceEndpointsFor is the record of Service ns/name from its
// EndpointSlices: the endpoints of the slices with the same ports in
// one subset, addresses and ports sorted and distinct. A port without
// a number is left out (Kubernetes: ports not restricted; Calico reads
// it as no member), a protocol not given is TCP, an address that is
// not an IP (an FQDN slice's) is left out.
func ServiceEndpointsFor(ns, name string, sl []*discoveryv1.EndpointSlice) *api.ServiceEndpoints {
	r := &api.ServiceEndpoints{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindServiceEndpoints},
		Metadata: api.ObjectMeta{Name: name, Namespace: ns}}
	owned(&r.Metadata, ns+"/"+name)
	bySig := map[string]*api.ServiceSubset{}
	for _, es := range sl {
		var ports []api.ServicePort
		for _, p := range es.Ports {
			if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
				continue
			}
			proto := api.ProtocolTCP
			if p.Protocol != nil {
				switch *p.Protocol {
				case corev1.ProtocolUDP:
					proto = api.ProtocolUDP
				case corev1.ProtocolSCTP:
					proto = api.ProtocolSCTP
				}
			}
			sp := api.ServicePort{Protocol: api.Protocol{Name: proto}, Port: uint16(*p.Port)}
			if p.Name != nil {
				sp.Name = *p.Name
			}
			ports = append(ports, sp)
		}
		slices.SortFunc(ports, comparePorts)
		ports = slices.Compact(ports)
		sig := fmt.Sprint(ports)
		sub := bySig[sig]
		if sub == nil {
			sub = &api.ServiceSubset{Ports: ports}
			bySig[sig] = sub
		}
		for _, ep := range es.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					sub.Addresses = append(sub.Addresses, ip.Unmap().String())
				}
			}
		}
	}
	for _, sig := range slices.Sorted(mapKeys(bySig)) {
		sub := bySig[sig]
		if len(sub.Addresses) == 0 {
			continue
		}
		slices.SortFunc(sub.Addresses, func(a, b string) int {
			return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
		})
		sub.Addresses = slices.Compact(sub.Addresses)
		r.Spec.Subsets = append(r.Spec.Subsets, *sub)
	}
	return r
}

func comparePorts(a, b api.ServicePort) int {
	return cmp.Or(cmp.Compare(a.Protocol.Name, b.Protocol.Name), cmp.Compare(a.Port, b.Port), strings.Compare(a.Name, b.Name))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sliceService is "<ns>/<service>" of an EndpointSlice (or of the last
// state of a deleted one), "" when it belongs to no Service.
func sliceService(o any) string {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	es, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return ""
	}
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return ""
	}
	return es.Namespace + "/" + svc
}

// trimSlice keeps of an EndpointSlice what ServiceEndpointsFor and the
// index read: its name, namespace, service label, addresses and ports.
func trimSlice(o any) (any, error) {
	es, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return o, nil
	}
	t := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: es.Name, Namespace: es.Namespace, ResourceVersion: es.ResourceVersion},
		AddressType: es.AddressType, Ports: es.Ports,
	}
	if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" {
		t.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	t.Endpoints = make([]discoveryv1.Endpoint, len(es.Endpoints))
	for i, ep := range es.Endpoints {
		t.Endpoints[i] = discoveryv1.Endpoint{Addresses: ep.Addresses}
	}
	return t, nil
}
