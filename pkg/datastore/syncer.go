package datastore

import (
	"context"
	"github.com/routed-net/routed/internal/heartbeat"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// EventType says whether a resource was created/updated or deleted.
type EventType int

// Event types.
const (
	EventSet EventType = iota
	EventDelete
)

// Event is one change to one resource.
type Event struct {
	Type     EventType
	Kind     api.Kind
	Name     string
	Resource api.Resource // nil for EventDelete
	Revision int64
}

// Snapshot is the full state of the synced kinds at one revision.
type Snapshot struct {
	Revision  int64
	Resources map[api.Kind][]api.Resource
}

// Handler receives a Snapshot, then Events; a later Snapshot (after a
// resync) replaces all earlier state. Calls come from one goroutine; the
// events of one kind come in revision order, different kinds may
// interleave (each kind is its own watch).
type Handler interface {
	OnSnapshot(s Snapshot)
	OnEvent(e Event)
}

// SyncOption narrows what Sync streams.
type SyncOption func(*syncScope)

type syncScope struct {
	endpointsOf string
	beat        *heartbeat.Beat
}

// WithBeat marks beat whenever the sync's watch makes progress (see
// heartbeat): the daemon's liveness reads it.
func WithBeat(b *heartbeat.Beat) SyncOption { return func(s *syncScope) { s.beat = b } }

// EndpointsOf limits WorkloadEndpoints to node's own: their names form
// one key range (api.WorkloadEndpointNamePrefix), so the node's watch
// carries no other node's pods.
func EndpointsOf(node string) SyncOption { return func(s *syncScope) { s.endpointsOf = node } }

// Sync streams the given kinds to h until ctx ends, resyncing by itself
// after compaction or a broken watch. Each kind is listed (paged) and
// watched on its own key range, so IPAM writes and other kinds' changes
// never reach h's watch. It returns ctx's error.
func (c *Client) Sync(ctx context.Context, kinds []api.Kind, h Handler, opts ...SyncOption) error {
	var scope syncScope
	for _, o := range opts {
		o(&scope)
	}
	want := make(map[string]api.Kind, len(kinds))
	ranges := make([]KeyRange, 0, len(kinds))
	for _, k := range kinds {
		want[k.Plural()] = k
		ranges = append(ranges, kindRange(k, scope))
	}
	return c.watchRanges(ctx, ranges, &typedHandler{want: want, h: h}, scope.beat)
}

// kindRange is the key range holding kind's resources within scope.
func kindRange(k api.Kind, scope syncScope) KeyRange {
	base := KeyPrefix + k.Plural() + "/"
	if k != api.KindWorkloadEndpoint || scope.endpointsOf == "" {
		return KeyRange{Key: base}
	}
	// "<node>-" followed by anything but '-' (that is a longer node's
	// name): every other valid name character sorts at or after '.'.
	p := base + api.WorkloadEndpointNamePrefix(scope.endpointsOf)
	return KeyRange{Key: p + ".", End: clientv3.GetPrefixRangeEnd(p)}
}

type typedHandler struct {
	want map[string]api.Kind
	h    Handler
}

// parse splits a key into kind and name, if it is a synced kind.
func (t *typedHandler) parse(key []byte) (api.Kind, string, bool) {
	rest, ok := strings.CutPrefix(string(key), KeyPrefix)
	if !ok {
		return "", "", false
	}
	plural, name, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(name, "/") {
		return "", "", false
	}
	k, ok := t.want[plural]
	return k, name, ok
}

func (t *typedHandler) OnRawSnapshot(kvs []*mvccpb.KeyValue, rev int64) {
	s := Snapshot{Revision: rev, Resources: map[api.Kind][]api.Resource{}}
	for _, k := range t.want {
		s.Resources[k] = nil
	}
	for _, kv := range kvs {
		k, _, ok := t.parse(kv.Key)
		if !ok {
			continue
		}
		r, err := decode(k, kv.Value, kv.ModRevision)
		if err != nil {
			log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable record")
			continue
		}
		s.Resources[k] = append(s.Resources[k], r)
	}
	t.h.OnSnapshot(s)
}

func (t *typedHandler) OnRawEvent(ev *clientv3.Event) {
	k, name, ok := t.parse(ev.Kv.Key)
	if !ok {
		return
	}
	e := Event{Kind: k, Name: name, Revision: ev.Kv.ModRevision}
	if ev.Type == clientv3.EventTypeDelete {
		e.Type = EventDelete
	} else {
		r, err := decode(k, ev.Kv.Value, ev.Kv.ModRevision)
		if err != nil {
			log.WithError(err).WithField("key", string(ev.Kv.Key)).Warn("skipping unreadable record")
			return
		}
		e.Resource = r
	}
	t.h.OnEvent(e)
}
