package gc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestTrustJudges: the stateless check of routed cluster-gc holds the
// pass while there is no identity or the datastore is not ready, lets
// it run once both are there, adopts an identity routedctl datastore
// reinit wrote within its window, and holds for good (until a restart)
// on another cluster's identity or a revision that went back.
func TestTrustJudges(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := &Trust{now: func() time.Time { return t0 }}
	ci := func(guid string, ready bool, rev int64) *datastore.ClusterInfo {
		return &datastore.ClusterInfo{GUID: guid, DatastoreReady: ready, Revision: rev}
	}
	steps := []struct {
		ci   *datastore.ClusterInfo
		err  error
		want string // "" trusted, else a word of the reason
	}{
		{&datastore.ClusterInfo{Revision: 1}, datastore.ErrNoClusterInfo, "no cluster identity"},
		{nil, errors.New("etcd unreachable"), "cannot read"},
		{ci("a", false, 5), nil, "not ready"},
		{ci("a", true, 6), nil, ""},
		{ci("a", true, 9), nil, ""},
		{&datastore.ClusterInfo{GUID: "b", DatastoreReady: true, Revision: 10, AdoptUntil: t0.Add(time.Hour)}, nil, ""}, // reinit
		{ci("b", true, 11), nil, ""},
		{ci("c", true, 12), nil, "another cluster"},
		{ci("b", true, 13), nil, "another cluster"}, // held until a restart
	}
	for i, s := range steps {
		got := tr.judgeLocked(s.ci, s.err)
		if (s.want == "") != (got == "") || !strings.Contains(got, s.want) {
			t.Fatalf("step %d: reason %q, want one saying %q", i, got, s.want)
		}
	}
	back := &Trust{now: func() time.Time { return t0 }}
	for i, s := range []struct {
		rev  int64
		want string
	}{{100, ""}, {120, ""}, {90, "back in time"}, {130, "back in time"}} {
		if got := back.judgeLocked(ci("a", true, s.rev), nil); (s.want == "") != (got == "") || !strings.Contains(got, s.want) {
			t.Fatalf("revision step %d: reason %q, want one saying %q", i, got, s.want)
		}
	}
}

// TestTrustReadsTheDatastore: Held reads the real identity record.
func TestTrustReadsTheDatastore(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	tr := NewTrust(ds)
	if !tr.Held() || !strings.Contains(tr.Reason(), "no cluster identity") {
		t.Fatalf("empty datastore: reason %q", tr.Reason())
	}
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if tr.Held() {
		t.Fatalf("initialised datastore held: %q", tr.Reason())
	}
	if _, err := ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !tr.Held() || !strings.Contains(tr.Reason(), "not ready") {
		t.Fatalf("not ready: reason %q", tr.Reason())
	}
}
