package bgp

import (
	"context"
	"testing"
)

// runSpeaker runs a speaker made from cfg until the test ends, with
// global g and no blocks of its own. (A file of its own: the tests
// using it are built with and without -race.)
func runSpeaker(t *testing.T, cfg Config, g Global) *Speaker {
	sp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = sp.Stop(context.Background()) // close sockets: the next test may reuse the port
	})
	sp.SetGlobal(g)
	sp.OnAffinitySnapshot(nil)
	return sp
}
