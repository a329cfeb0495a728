package cniserver

import (
	"fmt"
	"net/netip"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// endpointPut writes a pod's WorkloadEndpoint, naming the addresses, in
// the assignment's transaction (an ipam.Extra). The write is not
// conditional: as the plugin's own path does, it replaces a leftover of
// an earlier sandbox of the same pod.
type endpointPut struct {
	wep *api.WorkloadEndpoint
	rev int64 // set once committed
}

func (e *endpointPut) Writes(addrs []netip.Addr) ([]ipam.ExtraWrite, error) {
	nets := make([]string, len(addrs))
	for i, a := range addrs {
		nets[i] = netip.PrefixFrom(a, a.BitLen()).String()
	}
	e.wep.Spec.IPNetworks = nets
	e.wep.Metadata.ResourceVersion = ""
	key, val, err := datastore.Encode(e.wep)
	if err != nil {
		return nil, fmt.Errorf("WorkloadEndpoint %s: %w", e.wep.Metadata.Name, err)
	}
	return []ipam.ExtraWrite{{Key: key, AnyRev: true, Value: val}}, nil
}

func (e *endpointPut) Observe(string, *mvccpb.KeyValue) error { return nil }

func (e *endpointPut) Committed(rev int64) { e.rev = rev }

// endpointDel deletes a pod's WorkloadEndpoint in the release's
// transaction when it is the container's, and otherwise only requires it
// unchanged, so that "not ours" is decided on what the transaction saw.
// It starts from what the server believes (the revision it wrote, or
// absent) and learns the truth from a lost write.
type endpointDel struct {
	key, containerID string
	rev              int64 // believed ModRevision; 0: absent
	ours             bool  // the stored endpoint is the container's, or absent
	committed        int64
}

func (e *endpointDel) Writes([]netip.Addr) ([]ipam.ExtraWrite, error) {
	if e.rev == 0 || !e.ours {
		return []ipam.ExtraWrite{{Key: e.key, Rev: e.rev, Guard: true}}, nil
	}
	return []ipam.ExtraWrite{{Key: e.key, Rev: e.rev}}, nil
}

func (e *endpointDel) Observe(key string, kv *mvccpb.KeyValue) error {
	if kv == nil {
		e.rev, e.ours = 0, true
		return nil
	}
	r, err := datastore.Decode(api.KindWorkloadEndpoint, kv.Value, kv.ModRevision)
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	wep, ok := r.(*api.WorkloadEndpoint)
	if !ok {
		return fmt.Errorf("read %s: unexpected type %T", key, r)
	}
	e.rev, e.ours = kv.ModRevision, wep.Spec.ContainerID == e.containerID
	return nil
}

func (e *endpointDel) Committed(rev int64) { e.committed = rev }

// endpointRevs remembers the endpoints this server wrote (key -> the
// container and revision), so that a DEL usually deletes in its first
// transaction without reading. A wrong memory costs one lost write.
type endpointRevs struct {
	mu sync.Mutex
	m  map[string]endpointRev
}

type endpointRev struct {
	containerID string
	rev         int64
}

// maxRemembered bounds the memory; past it, it starts again (a node has
// far fewer pods).
const maxRemembered = 1 << 16

func (r *endpointRevs) put(key, containerID string, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRemembered {
		r.m = map[string]endpointRev{}
	}
	r.m[key] = endpointRev{containerID, rev}
}

func (r *endpointRevs) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}

// deleter returns the Extra that deletes the endpoint at key when it is
// containerID's.
func (r *endpointRevs) deleter(key, containerID string) *endpointDel {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := &endpointDel{key: key, containerID: containerID, ours: true}
	if e, ok := r.m[key]; ok {
		d.rev, d.ours = e.rev, e.containerID == containerID
	}
	return d
}
