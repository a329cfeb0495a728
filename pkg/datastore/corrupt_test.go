package datastore

import (
	"errors"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestCorruptRecordRepair: a stored record that does not decode is a
// CorruptError with its revision on Get; Apply replaces it and Delete
// without a resourceVersion deletes it (how an operator fixes one with
// routedctl).
func TestCorruptRecordRepair(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	key := Key(api.KindGlobalNetworkSet, "broken")
	put := func() int64 {
		t.Helper()
		resp, err := c.Etcd().Put(ctx, key, "{not json")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	rev := put()
	_, err := c.Get(ctx, api.KindGlobalNetworkSet, "broken")
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Revision != rev || ce.Kind != api.KindGlobalNetworkSet {
		t.Fatalf("Get of a corrupt record: %v (%+v), want a CorruptError at revision %d", err, ce, rev)
	}
	set := func() *api.GlobalNetworkSet {
		s := &api.GlobalNetworkSet{Metadata: api.ObjectMeta{Name: "broken"}}
		s.Spec.Nets = []string{"192.0.2.0/24"}
		return s
	}
	if _, err := c.Apply(ctx, set()); err != nil {
		t.Fatalf("Apply over a corrupt record: %v", err)
	}
	got, err := c.Get(ctx, api.KindGlobalNetworkSet, "broken")
	if err != nil || len(got.(*api.GlobalNetworkSet).Spec.Nets) != 1 {
		t.Fatalf("after Apply: %v, %v", got, err)
	}
	put()
	if err := c.Delete(ctx, api.KindGlobalNetworkSet, "broken", ""); err != nil {
		t.Fatalf("Delete of a corrupt record: %v", err)
	}
	if _, err := c.Get(ctx, api.KindGlobalNetworkSet, "broken"); !IsNotFound(err) {
		t.Fatalf("after Delete: %v, want not found", err)
	}
}
