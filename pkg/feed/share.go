package feed

import (
	"unique"

	"github.com/routed-net/routed/pkg/api"
)

// sharer makes the strings a big cluster's endpoints repeat one copy:
// label keys and values, node, namespace, profiles, port names. Decoded
// from JSON, each endpoint holds its own copy of each, so a snapshot of
// 150,000 endpoints (and what a consumer keeps of them) holds every label
// 150,000 times. A sharer serves one decoding goroutine; a string it has
// not seen is looked up in unique's table, which also shares it with
// other batches while any copy made there lives. Strings are immutable:
// a consumer that changes what it is given replaces them, never writes
// into them.
type sharer map[string]string

func (sh sharer) str(s string) string {
	if s == "" {
		return s
	}
	if v, ok := sh[s]; ok {
		return v
	}
	if len(sh) >= sharerMax {
		clear(sh)
	}
	v := unique.Make(s).Value()
	sh[v] = v
	return v
}

// sharerMax bounds what a sharer keeps (a decoding kept for a whole
// snapshot meets every pod's own strings too): about 1 MiB.
const sharerMax = 1 << 14

// resource shares r's repeated strings, for the kinds a cluster holds
// one of per pod (WorkloadEndpoints); others are few.
func (sh sharer) resource(r api.Resource) {
	w, ok := r.(*api.WorkloadEndpoint)
	if !ok {
		return
	}
	if len(w.Metadata.Labels) > 0 {
		labels := make(map[string]string, len(w.Metadata.Labels))
		for k, v := range w.Metadata.Labels {
			labels[sh.str(k)] = sh.str(v)
		}
		w.Metadata.Labels = labels
	}
	w.Metadata.Namespace = sh.str(w.Metadata.Namespace)
	s := &w.Spec
	s.Node, s.Orchestrator, s.Namespace = sh.str(s.Node), sh.str(s.Orchestrator), sh.str(s.Namespace)
	s.Endpoint, s.ContainerInterface, s.ServiceAccountName = sh.str(s.Endpoint), sh.str(s.ContainerInterface), sh.str(s.ServiceAccountName)
	for i := range s.Profiles {
		s.Profiles[i] = sh.str(s.Profiles[i])
	}
	for i := range s.Ports {
		s.Ports[i].Name = sh.str(s.Ports[i].Name)
	}
}
