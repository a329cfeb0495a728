package datastore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/cutproxy"
)

// TestStreamCutOffWhileEtcdCompacts is the e2e test's node cut off from
// every etcd member while the rest of the cluster writes and compacts at
// its current revision. etcd keeps the compaction's own revision: a
// watch from it is served (mvcc reports a compaction only for a watcher
// whose next revision is below it). So a stream that missed exactly one
// write, compacted at that write, resumes and receives it; one that
// missed more lists again (reason compacted). Either way the consumer
// ends with etcd's state: nothing is skipped.
func TestStreamCutOffWhileEtcdCompacts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		writes   int
		wantList bool
	}{
		{"compacted at the one revision missed: resumes", 1, false},
		{"compacted past the revision held: lists", 2, true},
		{"compacted far past the revision held: lists", 5, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			writer, srv := newTestClient(t)
			p := cutproxy.Start(t, strings.TrimPrefix(srv.Endpoints[0], "http://"))
			c := connect(t, Config{Endpoints: []string{"http://" + p.Addr()}, RequestTimeout: time.Second})
			put(t, writer, "/cut/probe", "id")
			r := newStreamRecorder()
			startStream(t, c, "/cut/", r, "/cut/probe")
			r.waitFor(t, "the list", func() bool { return len(r.reasons) == 1 })
			held := put(t, writer, "/cut/a", "1")
			r.waitFor(t, "a", func() bool { return r.rev >= held })

			p.Cut()
			var last int64
			for i := range tt.writes {
				last = put(t, writer, fmt.Sprintf("/cut/w%d", i), "x")
			}
			if _, err := writer.Etcd().Compact(context.Background(), last, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			p.Heal()

			want := []string{"/cut/a", "/cut/probe"}
			for i := range tt.writes {
				want = append(want, fmt.Sprintf("/cut/w%d", i))
			}
			slices.Sort(want)
			r.waitFor(t, "every write made while cut off", func() bool { return r.rev >= last && r.keys() == strings.Join(want, ",") })
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Logf("held %d, compacted at %d: lists %v, resumes %d", held, last, r.reasons, r.resumes)
			listed := slices.Contains(r.reasons, ListCompacted)
			if listed != tt.wantList {
				t.Fatalf("held revision %d, etcd compacted at %d: lists %v, resumes %d; want a list (compacted) %v", held, last, r.reasons, r.resumes, tt.wantList)
			}
			if !tt.wantList && (len(r.reasons) != 1 || r.resumes < 1) {
				t.Fatalf("lists %v, resumes %d; want only the first list and a resume", r.reasons, r.resumes)
			}
		})
	}
}
