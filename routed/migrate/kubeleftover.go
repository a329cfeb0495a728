package migrate

import (
	"context"
	"maps"
	"slices"

	"github.com/routed-net/routed/pkg/api"
)

// leftovers records Calico's custom resources the migration does not
// read (the etcd source's leftovers, for the Kubernetes datastore): per
// resource the API server serves in Calico's group and holds objects of,
// a count, the first names and what is lost.
func (s *kubeSource) leftovers(ctx context.Context, st *calicoState) error {
	// Nodes, profiles and workload endpoints, should Calico's group
	// serve them, are what readKube derives from Kubernetes objects.
	carried := map[string]bool{crdIPAMBlocks: true, crdAffinities: true, crdHandles: true, s.ipamConfigs: true,
		api.KindNode.Plural(): true, api.KindProfile.Plural(): true, api.KindWorkloadEndpoint.Plural(): true, kubeControllersConfigs: true}
	for _, k := range crdKinds {
		carried[k.Plural()] = true
	}
	for _, plural := range slices.Sorted(maps.Keys(s.served)) {
		if carried[plural] {
			continue
		}
		items, err := s.listCRD(ctx, plural)
		if err != nil {
			return err
		}
		if len(items) == 0 {
			continue
		}
		names := make([]string, len(items))
		for i := range items {
			names[i] = objectName(&items[i])
		}
		st.leftover(plural, names)
	}
	return nil
}
