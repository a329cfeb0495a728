package controllers

import (
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// serviceRefKinds are the kinds whose rules can name a Service: the
// enforced ones, and the staged policies, so that `routedctl policy
// explain` previews a staged rule naming a Service with its endpoints.
var serviceRefKinds = []api.Kind{api.KindNetworkPolicy, api.KindGlobalNetworkPolicy, api.KindProfile,
	api.KindStagedNetworkPolicy, api.KindStagedGlobalNetworkPolicy}

// serviceRefs knows which Services some rule names, from
// datastore watches of serviceRefKinds: only those Services get a
// ServiceEndpoints record, so a cluster's thousands of Services cost
// every node nothing but the few that policy names. It is safe for
// concurrent use (the streams write, the worker reads).
type serviceRefs struct {
	// changed is told of each Service whose being named changed (and of
	// every named one when a kind is listed).
	changed func(svc string)
	// onSynced runs once, when every kind has been listed.
	onSynced func()

	mu     sync.Mutex
	byObj  map[string][]string // "<kind>/<store name>" -> Services it names ("<ns>/<name>")
	count  map[string]int      // Service -> objects naming it
	listed map[api.Kind]bool
}

func newServiceRefs(changed func(string), onSynced func()) *serviceRefs {
	return &serviceRefs{changed: changed, onSynced: onSynced, byObj: map[string][]string{}, count: map[string]int{}, listed: map[api.Kind]bool{}}
}

// synced reports whether every kind has been listed: before, a Service
// not named may yet be.
func (x *serviceRefs) synced() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.listed) == len(serviceRefKinds)
}

// named reports whether some rule names the Service "<ns>/<name>".
func (x *serviceRefs) named(svc string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.count[svc] > 0
}

// all lists the Services some rule names.
func (x *serviceRefs) all() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]string, 0, len(x.count))
	for s := range x.count {
		out = append(out, s)
	}
	return out
}

// handler is the stream handler of one kind.
func (x *serviceRefs) handler(k api.Kind) datastore.StreamHandler { return refStream{x: x, kind: k} }

type refStream struct {
	x    *serviceRefs
	kind api.Kind
}

// OnList implements datastore.StreamHandler: the kind's objects are
// replaced by the list's.
func (h refStream) OnList(kvs []*mvccpb.KeyValue, rev int64, _ datastore.ListReason) {
	x := h.x
	x.mu.Lock()
	var touched []string
	prefix := string(h.kind) + "/"
	for obj, svcs := range x.byObj {
		if len(obj) > len(prefix) && obj[:len(prefix)] == prefix {
			touched = append(touched, x.setLocked(obj, nil, svcs)...)
		}
	}
	for _, kv := range kvs {
		obj, svcs := h.decode(kv)
		if obj != "" {
			touched = append(touched, x.setLocked(obj, svcs, x.byObj[obj])...)
		}
	}
	first := len(x.listed) < len(serviceRefKinds)
	x.listed[h.kind] = true
	nowSynced := first && len(x.listed) == len(serviceRefKinds)
	x.mu.Unlock()
	for _, s := range touched {
		x.changed(s)
	}
	if nowSynced && x.onSynced != nil {
		x.onSynced()
	}
}

// OnEvents implements datastore.StreamHandler.
func (h refStream) OnEvents(evs []*clientv3.Event, _ int64) {
	x := h.x
	x.mu.Lock()
	var touched []string
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypeDelete {
			if _, name, ok := datastore.ParseKey(string(ev.Kv.Key)); ok {
				obj := string(h.kind) + "/" + name
				touched = append(touched, x.setLocked(obj, nil, x.byObj[obj])...)
			}
			continue
		}
		if obj, svcs := h.decode(ev.Kv); obj != "" {
			touched = append(touched, x.setLocked(obj, svcs, x.byObj[obj])...)
		}
	}
	x.mu.Unlock()
	for _, s := range touched {
		x.changed(s)
	}
}

// decode reads one object and the Services its rules name; obj is ""
// for a key that is no object of the kind.
func (h refStream) decode(kv *mvccpb.KeyValue) (obj string, svcs []string) {
	k, name, ok := datastore.ParseKey(string(kv.Key))
	if !ok || k != h.kind {
		return "", nil
	}
	r, err := datastore.Decode(k, kv.Value, kv.ModRevision)
	if err != nil {
		log.WithError(err).WithField("key", string(kv.Key)).Warn("unreadable object: the Services its rules name are not resolved")
		return string(k) + "/" + name, nil
	}
	return string(k) + "/" + name, ServicesNamed(r)
}

// setLocked replaces what obj names (old by now) and returns the
// Services whose count crossed zero.
func (x *serviceRefs) setLocked(obj string, now, old []string) (touched []string) {
	for _, s := range old {
		if x.count[s]--; x.count[s] <= 0 {
			delete(x.count, s)
			touched = append(touched, s)
		}
	}
	for _, s := range now {
		if x.count[s]++; x.count[s] == 1 {
			touched = append(touched, s)
		}
	}
	if len(now) == 0 {
		delete(x.byObj, obj)
	} else {
		x.byObj[obj] = now
	}
	return touched
}

// ServicesNamed lists the Services ("<namespace>/<name>", distinct) the
// rules of a NetworkPolicy, GlobalNetworkPolicy or Profile (or a staged
// policy) name; a NetworkPolicy's default to its namespace. A match without a namespace
// where there is no default (refused by validation) names nothing.
func ServicesNamed(r api.Resource) []string {
	var in, out []api.Rule
	ns := ""
	switch p := r.(type) {
	case *api.NetworkPolicy:
		in, out, ns = p.Spec.Ingress, p.Spec.Egress, p.Metadata.Namespace
	case *api.GlobalNetworkPolicy:
		in, out = p.Spec.Ingress, p.Spec.Egress
	case *api.Profile:
		in, out = p.Spec.Ingress, p.Spec.Egress
	case *api.StagedNetworkPolicy:
		in, out, ns = p.Spec.Ingress, p.Spec.Egress, p.Metadata.Namespace
	case *api.StagedGlobalNetworkPolicy:
		in, out = p.Spec.Ingress, p.Spec.Egress
	default:
		return nil
	}
	var svcs []string
	for _, rules := range [][]api.Rule{in, out} {
		for _, rule := range rules {
			for _, sm := range []*api.ServiceMatch{rule.Source.Services, rule.Destination.Services} {
				if sm == nil || sm.Name == "" {
					continue
				}
				n := sm.Namespace
				if n == "" {
					n = ns
				}
				if n == "" {
					continue
				}
				s := n + "/" + sm.Name
				if !slices.Contains(svcs, s) {
					svcs = append(svcs, s)
				}
			}
		}
	}
	return svcs
}
