//go:build !cnithin

package ipamcore

import (
	"fmt"
	"net/netip"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// EndpointPut writes a pod's WorkloadEndpoint, naming the assigned
// addresses, in the assignment's transaction (Assignment.Extra), so the
// endpoint and the addresses it names land together or not at all. The
// write is not conditional: it replaces a leftover of an earlier sandbox
// of the same pod, as an endpoint written on its own would.
type EndpointPut struct {
	wep *api.WorkloadEndpoint
	rev int64 // set once committed
}

// NewEndpointPut returns the Extra that writes wep; its IPNetworks are
// filled in with the addresses.
func NewEndpointPut(wep *api.WorkloadEndpoint) *EndpointPut { return &EndpointPut{wep: wep} }

// Writes implements ipam.Extra.
func (e *EndpointPut) Writes(addrs []netip.Addr) ([]ipam.ExtraWrite, error) {
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

// Observe implements ipam.Extra: an unconditional write needs nothing.
func (e *EndpointPut) Observe(string, *mvccpb.KeyValue) error { return nil }

// Committed implements ipam.ExtraCommitted.
func (e *EndpointPut) Committed(rev int64) { e.rev = rev }

// Rev is the endpoint's revision once written (0 before).
func (e *EndpointPut) Rev() int64 { return e.rev }

// EndpointDel deletes a pod's WorkloadEndpoint in a release's
// transaction (IPAM.ReleaseWith, or Assignment.Undo) when the stored one
// is the container's, and otherwise only requires it unchanged, so that
// "not ours" is decided on what the transaction saw. It starts from what
// the caller believes (a revision read or written, or absent) and learns
// the truth from a lost write.
type EndpointDel struct {
	key, containerID string
	rev              int64 // believed ModRevision; 0: absent
	ours             bool  // the stored endpoint is the container's, or absent
}

// NewEndpointDel returns the Extra that deletes endpoint name if it is
// containerID's, believed to be at revision rev (0: absent) and to be
// the container's when ours.
func NewEndpointDel(name, containerID string, rev int64, ours bool) *EndpointDel {
	return &EndpointDel{key: datastore.Key(api.KindWorkloadEndpoint, name), containerID: containerID, rev: rev, ours: ours}
}

// Key is the endpoint's datastore key.
func (e *EndpointDel) Key() string { return e.key }

// Ours reports whether, as of the committed transaction, the endpoint
// was the container's (and is now deleted) or absent.
func (e *EndpointDel) Ours() bool { return e.ours }

// Writes implements ipam.Extra.
func (e *EndpointDel) Writes([]netip.Addr) ([]ipam.ExtraWrite, error) {
	if e.rev == 0 || !e.ours {
		return []ipam.ExtraWrite{{Key: e.key, Rev: e.rev, Guard: true}}, nil
	}
	return []ipam.ExtraWrite{{Key: e.key, Rev: e.rev}}, nil
}

// Observe implements ipam.Extra.
func (e *EndpointDel) Observe(key string, kv *mvccpb.KeyValue) error {
	if kv == nil {
		e.rev, e.ours = 0, true
		return nil
	}
	r, err := datastore.Decode(api.KindWorkloadEndpoint, kv.Value, kv.ModRevision)
	if err != nil {
		e.rev, e.ours = kv.ModRevision, UnreadableEndpointIsOurs(kv.Value, e.containerID)
		return nil
	}
	wep, ok := r.(*api.WorkloadEndpoint)
	if !ok {
		return fmt.Errorf("read %s: unexpected type %T", key, r)
	}
	e.rev, e.ours = kv.ModRevision, wep.Spec.ContainerID == e.containerID
	return nil
}

// UnreadableEndpointIsOurs decides whether an endpoint record that does
// not decode is containerID's, for its DEL: only when it still names
// that container. A DEL that failed on the record instead would fail
// for ever (the pod never torn down, its address never released). One
// naming no container it can read is not taken as ours: it could be a
// newer sandbox's of the same pod (same endpoint name, same host veth
// name), which a retried DEL of the old one would take down. It stays,
// and the DEL goes on without it (routedctl delete removes it).
func UnreadableEndpointIsOurs(raw []byte, containerID string) bool {
	return api.SalvageEndpointContainer(raw) == containerID && containerID != ""
}
