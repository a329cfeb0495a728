package cniserver

import (
	"sync"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

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

// deleter returns the Extra that deletes endpoint name when it is
// containerID's, starting from what the server remembers of it.
func (r *endpointRevs) deleter(name, containerID string) *ipamcore.EndpointDel {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := datastore.Key(api.KindWorkloadEndpoint, name)
	if e, ok := r.m[key]; ok {
		return ipamcore.NewEndpointDel(name, containerID, e.rev, e.containerID == containerID)
	}
	return ipamcore.NewEndpointDel(name, containerID, 0, true)
}
