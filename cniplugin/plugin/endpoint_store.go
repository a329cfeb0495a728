//go:build !cnithin

package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// endpointWriteBudget bounds writeEndpoint's retries: several etcd
// elections, well inside a kubelet's CNI timeout.
const endpointWriteBudget = 30 * time.Second

// writeEndpoint creates the endpoint, replacing a leftover of an earlier
// sandbox of the same pod (same name, other container ID), and returns
// the stored revision so rollback deletes exactly what it wrote. An
// unreachable etcd (an election, a member lost mid-request) is retried
// for up to endpointWriteBudget: a create that did land comes back as
// ErrExists and is applied again, the same content.
func writeEndpoint(ctx context.Context, store Store, wep *api.WorkloadEndpoint) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, endpointWriteBudget)
	defer cancel()
	var r api.Resource
	err := datastore.RetryUnavailable(ctx, func() error {
		var err error
		r, err = store.Create(ctx, wep)
		if errors.Is(err, datastore.ErrExists) {
			r, err = store.Apply(ctx, wep)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("write WorkloadEndpoint %s: %w", wep.Metadata.Name, err)
	}
	return r.Meta().ResourceVersion, nil
}

// getEndpoint reads this attachment's endpoint; nil without error when
// there is none. An unreachable etcd is retried as RetryUnavailable does
// (an election must not fail a DEL: the runtime would retry it, but the
// pod's address and endpoint stay until it does).
func getEndpoint(ctx context.Context, store Store, name string) (*api.WorkloadEndpoint, error) {
	var r api.Resource
	err := datastore.RetryUnavailable(ctx, func() error {
		var err error
		r, err = store.Get(ctx, api.KindWorkloadEndpoint, name)
		return err
	})
	if datastore.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read WorkloadEndpoint %s: %w", name, err)
	}
	wep, ok := r.(*api.WorkloadEndpoint)
	if !ok {
		return nil, fmt.Errorf("read WorkloadEndpoint %s: unexpected type %T", name, r)
	}
	return wep, nil
}

// deleteEndpoint removes an endpoint at a known revision; gone already,
// or replaced since by a newer sandbox, both count as done. A delete at
// a revision is safe to repeat, so an unreachable etcd is retried (a
// delete that landed before the error comes back as not found).
func deleteEndpoint(ctx context.Context, store Store, name, rev string) error {
	err := datastore.RetryUnavailable(ctx, func() error {
		return store.Delete(ctx, api.KindWorkloadEndpoint, name, rev)
	})
	if err == nil || datastore.IsNotFound(err) || errors.Is(err, datastore.ErrConflict) {
		return nil
	}
	return fmt.Errorf("delete WorkloadEndpoint %s: %w", name, err)
}
