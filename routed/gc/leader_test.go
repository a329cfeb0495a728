package gc

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestOneGCLeader: of two candidates exactly one runs at a time, and when
// the leader stops the other takes over.
func TestOneGCLeader(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	var running, maxRunning atomic.Int32
	var mu sync.Mutex
	leaders := map[string]int{}
	work := func(name string) func(context.Context, datastore.Fence) {
		return func(ctx context.Context, _ datastore.Fence) {
			n := running.Add(1)
			for {
				m := maxRunning.Load()
				if n <= m || maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			mu.Lock()
			leaders[name]++
			mu.Unlock()
			<-ctx.Done()
			running.Add(-1)
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA := make(chan struct{})
	go func() { runAsLeader(ctxA, ds, gcElection+"-test", "a", work("a")); close(doneA) }()
	waitFor(t, func() bool { return running.Load() == 1 })
	go runAsLeader(ctxB, ds, gcElection+"-test", "b", work("b"))
	// b campaigns while a leads: its candidate key is in etcd.
	waitFor(t, func() bool {
		resp, err := ds.Etcd().Get(context.Background(), gcElection+"-test/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	if got := running.Load(); got != 1 {
		t.Fatalf("%d leaders while a leads", got)
	}
	stopA() // a resigns: b must take over
	<-doneA
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return leaders["b"] == 1 && running.Load() == 1
	})
	if m := maxRunning.Load(); m != 1 {
		t.Fatalf("at some point %d leaders ran at once", m)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		if !cond() {
			return "condition not met"
		}
		return ""
	})
}
