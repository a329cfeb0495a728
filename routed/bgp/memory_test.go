package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/testenv"
)

// TestPeerHeapCost configures a route reflector's sessions (passive
// route-reflector clients, none connecting) and bounds the heap each
// one costs before it holds a route. GoBGP v4.8.0 allocated a 2,048-shard
// Adj-RIB-In per session, about 200 KiB each (20 MB for a reflector with
// 100 clients); routed builds against a copy with 16 shards
// (third_party/gobgp). This fails if the go.mod replace is dropped.
func TestPeerHeapCost(t *testing.T) {
	const peers = 100
	const maxPerPeer = 64 << 10
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	sp, err := New(Config{NodeName: "rr1", ListenPort: -1, StateDir: t.TempDir(), Log: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1")})
	waitPeers(t, sp, 0)
	before := heapAfterGC()

	want := make([]Peer, peers)
	for i := range want {
		want[i] = Peer{Address: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), ASN: 64512,
			Type: PeerTypeRouteReflector, Passive: true, RRClient: true, RRClusterID: "10.0.0.1",
			HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second}
	}
	sp.SetPeers(want)
	waitPeers(t, sp, peers)
	after := heapAfterGC()

	perPeer := (int64(after) - int64(before)) / peers
	t.Logf("heap per configured session: %d KiB (%d -> %d KiB for %d)", perPeer>>10, before>>10, after>>10, peers)
	if perPeer > maxPerPeer {
		t.Fatalf("a configured session costs %d KiB of heap, more than %d KiB: is GoBGP's Adj-RIB-In back to 2,048 shards?",
			perPeer>>10, maxPerPeer>>10)
	}
}

// waitPeers waits until BGP runs with n sessions configured in GoBGP.
func waitPeers(t *testing.T, sp *Speaker, n int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		if !sp.getView().started {
			return "BGP not started"
		}
		got := 0
		err := sp.srv().ListPeer(context.Background(), &api.ListPeerRequest{}, func(*api.Peer) { got++ })
		if err != nil || got != n {
			return fmt.Sprintf("waiting for %d sessions in GoBGP: %d (%v)", n, got, err)
		}
		return ""
	})
}

func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
