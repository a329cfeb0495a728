package gc

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
)

// TestTrustAlive: Alive is fine while judgements finish, also when they
// hold (no identity yet), and reports a check stuck longer than the
// limit, here one held on its lock, as the liveness probe's /livez does;
// the next finished judgement makes it alive again.
func TestTrustAlive(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); clock = clock.Add(d) }
	tr := NewTrust(context.Background(), ds)
	tr.now, tr.judged = now, now()

	if !tr.Held() {
		t.Fatal("trusted a datastore with no identity")
	}
	if err := tr.Alive(time.Minute); err != nil {
		t.Fatalf("a held judgement that finished: %v", err)
	}
	advance(59 * time.Second)
	if err := tr.Alive(time.Minute); err != nil {
		t.Fatalf("59 s after the last judgement: %v", err)
	}

	// A judgement stuck (on its lock, here) while time passes.
	tr.check.Lock()
	stuck := make(chan bool)
	go func() { stuck <- tr.Held() }()
	advance(2 * time.Second)
	err := tr.Alive(time.Minute)
	if err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("61 s after the last judgement, the next stuck: %v, want an error saying stuck", err)
	}
	tr.check.Unlock()
	<-stuck
	if err := tr.Alive(time.Minute); err != nil {
		t.Fatalf("once the stuck judgement finished: %v", err)
	}
}
