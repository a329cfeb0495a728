// Package dstest gives tests a datastore client on a fresh embedded etcd
// and a way to apply YAML to it.
package dstest

import (
	"context"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// Client starts a fresh embedded etcd and returns a client for it; both
// are closed when the test ends.
func Client(t testing.TB) *datastore.Client {
	t.Helper()
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	return ds
}

// Apply creates or updates every resource in yaml.
func Apply(t testing.TB, ds *datastore.Client, yaml string) {
	t.Helper()
	dec, err := api.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range dec.Resources {
		if _, err := ds.Apply(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}
