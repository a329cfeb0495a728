package datastore

import (
	"errors"
	"strings"
	"testing"
)

// TestFenceIdentity: a fence with the cluster identity's ModRevision
// lets writes through while the identity is unchanged, and refuses them
// (ErrFenced, naming the identity) once it changed, also after it is
// set back; a fence without it does not look at the identity.
func TestFenceIdentity(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	ci, err := c.InitClusterInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.etcd.Put(ctx, "/routed/test/fence-identity/leader", "me")
	if err != nil {
		t.Fatal(err)
	}
	plain := Fence{Key: "/routed/test/fence-identity/leader", Rev: resp.Header.Revision}
	guarded := plain
	guarded.Identity = ci.ModRevision
	if err := c.PutRawFenced(ctx, "/routed/test/fence-identity/a", 0, "1", guarded); err != nil {
		t.Fatalf("identity unchanged: %v", err)
	}
	for _, ready := range []bool{false, true} {
		if _, err := c.SetDatastoreReady(ctx, ready); err != nil {
			t.Fatal(err)
		}
		err := c.PutRawFenced(ctx, "/routed/test/fence-identity/b", 0, "1", guarded)
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "cluster identity changed") {
			t.Fatalf("identity changed (ready %v): %v, want ErrFenced naming the identity", ready, err)
		}
	}
	if err := c.PutRawFenced(ctx, "/routed/test/fence-identity/b", 0, "1", plain); err != nil {
		t.Fatalf("a fence without the identity: %v", err)
	}
	if err := c.PutRawFenced(ctx, "/routed/test/fence-identity/b", 0, "2", plain); !errors.Is(err, ErrConflict) {
		t.Fatalf("a conflict under a holding fence: %v, want ErrConflict", err)
	}
}
