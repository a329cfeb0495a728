package daemon

import (
	"context"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// RemoveOrphanEndpoints deletes WorkloadEndpoints whose node no longer
// exists and that are older than grace (so an endpoint written just
// before its node registered is safe). IPAM GC then frees their
// addresses, and the dead node's blocks return to the pool. Each delete
// is conditional on the revision read, so a concurrent change wins.
func RemoveOrphanEndpoints(ctx context.Context, ds *datastore.Client, grace time.Duration, now time.Time) (int, error) {
	nodes, _, err := ds.List(ctx, api.KindNode)
	if err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		live[n.Meta().Name] = true
	}
	weps, _, err := ds.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, r := range weps {
		w := r.(*api.WorkloadEndpoint)
		if live[w.Spec.Node] {
			continue
		}
		created, err := time.Parse(time.RFC3339, w.Metadata.CreationTimestamp)
		if err == nil && now.Sub(created) < grace {
			continue
		}
		err = ds.Delete(ctx, api.KindWorkloadEndpoint, w.Metadata.Name, w.Metadata.ResourceVersion)
		switch {
		case err == nil:
			removed++
			log.WithFields(map[string]any{"endpoint": w.Metadata.Name, "node": w.Spec.Node}).Info("removed endpoint of a deleted node")
		case datastore.IsNotFound(err):
		default:
			log.WithError(err).WithField("endpoint", w.Metadata.Name).Warn("could not remove endpoint of a deleted node")
		}
	}
	return removed, nil
}
