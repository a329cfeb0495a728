package datastore

import (
	"sync"
	"testing"
	"time"
)

// TestClusterInfoLifecycle: racing first nodes agree on one identity,
// set-ready needs an identity, reinit gives a new one adoptable for its
// window only.
func TestClusterInfoLifecycle(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	_, err := c.GetClusterInfo(ctx, 0)
	wantErr(t, "identity of an empty datastore", err, ErrNoClusterInfo)
	_, err = c.SetDatastoreReady(ctx, false)
	wantErr(t, "set-ready on an empty datastore", err, ErrNoClusterInfo)

	// Eight nodes start at once on an empty datastore: one GUID wins.
	guids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range guids {
		wg.Go(func() {
			ci, err := c.InitClusterInfo(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			guids[i] = ci.GUID
		})
	}
	wg.Wait()
	for _, g := range guids {
		if g == "" || g != guids[0] {
			t.Fatalf("racing initialisations disagree: %v", guids)
		}
	}
	first, err := c.GetClusterInfo(ctx, 0)
	if err != nil || !first.DatastoreReady || first.Adoptable(time.Now()) {
		t.Fatalf("initial identity %+v, %v: want ready and not adoptable", first, err)
	}

	ci, err := c.SetDatastoreReady(ctx, false)
	if err != nil || ci.DatastoreReady || ci.GUID != first.GUID {
		t.Fatalf("set-ready false: %+v, %v", ci, err)
	}
	if ci.Revision <= first.Revision {
		t.Fatalf("revision did not move: %d then %d", first.Revision, ci.Revision)
	}

	if _, err := c.ReinitClusterInfo(ctx, 0); err == nil {
		t.Fatal("reinit accepted a zero adoption window")
	}
	re, err := c.ReinitClusterInfo(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if re.GUID == first.GUID || !re.DatastoreReady {
		t.Fatalf("reinit kept the old identity or is not ready: %+v", re)
	}
	if !re.Adoptable(time.Now()) || re.Adoptable(time.Now().Add(2*time.Hour)) {
		t.Fatalf("adoption window wrong: until %s", re.AdoptUntil)
	}
	// InitClusterInfo never replaces an existing identity.
	again, err := c.InitClusterInfo(ctx)
	if err != nil || again.GUID != re.GUID {
		t.Fatalf("init over an existing identity: %+v, %v", again, err)
	}
	// The identity as of an older revision is the first one.
	old, err := c.GetClusterInfo(ctx, first.Revision)
	if err != nil || old.GUID != first.GUID {
		t.Fatalf("identity at revision %d: %+v, %v", first.Revision, old, err)
	}
}
