//go:build !cnithin

package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// flakyStore answers Get and Delete with an unreachable etcd for the
// first failures calls, then with result.
type flakyStore struct {
	Store
	failures, calls int
	result          error
	wep             *api.WorkloadEndpoint
}

func (s *flakyStore) answer() error {
	s.calls++
	if s.calls <= s.failures {
		return fmt.Errorf("%w: an election", datastore.ErrUnavailable)
	}
	return s.result
}

func (s *flakyStore) Get(context.Context, api.Kind, string) (api.Resource, error) {
	if err := s.answer(); err != nil {
		return nil, err
	}
	return s.wep, nil
}

func (s *flakyStore) Delete(context.Context, api.Kind, string, string) error { return s.answer() }

// TestEndpointDeleteRidesOutAnElection: a DEL's read and delete of the
// endpoint retry while etcd is unreachable (a leader election: the soak
// saw a DEL fail on it) and fail at once on any other error.
func TestEndpointDeleteRidesOutAnElection(t *testing.T) {
	ctx := context.Background()
	wep := &api.WorkloadEndpoint{}
	wep.Metadata.Name = "n-k8s-ns-pod-eth0"

	s := &flakyStore{failures: 2, wep: wep}
	got, err := getEndpoint(ctx, s, wep.Metadata.Name)
	if err != nil || got != wep || s.calls != 3 {
		t.Fatalf("getEndpoint through 2 unavailable answers: %v, %v after %d calls; want the endpoint after 3", got, err, s.calls)
	}
	s = &flakyStore{failures: 2}
	if err := deleteEndpoint(ctx, s, wep.Metadata.Name, "7"); err != nil || s.calls != 3 {
		t.Fatalf("deleteEndpoint through 2 unavailable answers: %v after %d calls; want success after 3", err, s.calls)
	}
	s = &flakyStore{failures: 1, result: datastore.ErrNotFound}
	if err := deleteEndpoint(ctx, s, wep.Metadata.Name, "7"); err != nil {
		t.Fatalf("a delete that landed before the error (not found on retry) must count as done: %v", err)
	}
	denied := errors.New("permission denied")
	s = &flakyStore{result: denied}
	if err := deleteEndpoint(ctx, s, wep.Metadata.Name, "7"); !errors.Is(err, denied) || s.calls != 1 {
		t.Fatalf("deleteEndpoint on a non-transient error: %v after %d calls; want it at once", err, s.calls)
	}
}
