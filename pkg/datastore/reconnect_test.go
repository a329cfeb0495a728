package datastore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// TestReconnectsWithinTwoSeconds: after etcd has been down long enough
// for gRPC's default backoff to grow (it reaches 20-30 s), the client is
// usable again within 2 s of etcd coming back. The figure is logged.
func TestReconnectsWithinTwoSeconds(t *testing.T) {
	t.Parallel()
	e := newRestartableEtcd(t)
	c := connect(t, Config{Endpoints: e.srv.Endpoints, RequestTimeout: time.Second})
	ctx := context.Background()
	if _, _, err := c.List(ctx, "Node"); err != nil {
		t.Fatal(err)
	}
	e.stop()
	// Keep the client trying for a while, as a node does during an outage.
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		_, _, _ = c.List(ctx, "Node")
		time.Sleep(500 * time.Millisecond) // not a poll: the outage must last 12 s for gRPC's backoff to grow
	}
	if c.Connected() {
		t.Fatal("Connected() with etcd stopped")
	}
	e.start()
	back := time.Now()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if _, _, err := c.List(ctx, "Node"); err != nil || !c.Connected() {
			return fmt.Sprintf("not reconnected %s after etcd came back: list %v, connected %v", time.Since(back), err, c.Connected())
		}
		return ""
	})
	took := time.Since(back)
	t.Logf("reconnected %s after etcd came back (outage 12 s)", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("reconnect took %s, want at most 2 s", took)
	}
}
