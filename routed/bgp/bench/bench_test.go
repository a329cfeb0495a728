//go:build !race

// Package bench measures how fast a block claimed on one node reaches
// the RouteSink of every other node, for a full mesh and for clients
// behind route reflectors, and what a speaker costs in memory.
//
// Speakers run in this process on loopback addresses (127.x.y.z, each
// listening on its own address on one shared port), configured by
// confd.Compute from synthetic Node/BGPConfiguration/BGPPeer resources,
// so neither root nor namespaces are needed. Latency is measured from
// the affinity update (what the IPAM watch delivers) to the RouteSink
// call; the kernel route felix then writes is not included.
//
// MiB/speaker is heap and stack in use per speaker once all sessions are
// up with empty RIBs; MiB/speaker-with-routes is the same after the run,
// when every client holds every block advertised (one per iteration).
//
// Run: go test ./routed/bgp/bench -run '^$' -bench . -benchtime 300x
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/confd"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

func BenchmarkPropagationMesh10(b *testing.B) { benchPropagation(b, 10, 0) }

func BenchmarkPropagationRR50Clients2RRs(b *testing.B) { benchPropagation(b, 50, 2) }

// minSamples is the least number of claims the percentiles are taken
// over: with fewer than 200 the "p99" would be the maximum.
const minSamples = 200

// settle lets the sessions finish their initial exchange (End-of-RIB,
// keepalives) before measuring the steady state.
const settle = 2 * time.Second

type member struct {
	name string
	sp   *bgp.Speaker
	sink *bgptest.Recorder // nil on a route reflector (no felix there)
}

func benchPropagation(b *testing.B, clients, rrs int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	base := [3]byte{127, byte(100 + rand.IntN(100)), byte(rand.IntN(250))}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(i)}) }

	var nodes []*api.Node
	for i := 1; i <= rrs; i++ {
		nodes = append(nodes, &api.Node{Metadata: api.ObjectMeta{Name: fmt.Sprintf("rr%d", i), Labels: map[string]string{"rr": "true"}},
			Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: addr(200+i).String() + "/8", RouteReflectorClusterID: "224.0.0.1"}}})
	}
	for i := 1; i <= clients; i++ {
		nodes = append(nodes, &api.Node{Metadata: api.ObjectMeta{Name: fmt.Sprintf("n%d", i)},
			Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: addr(i).String() + "/8"}}})
	}
	mesh := rrs == 0
	configs := []*api.BGPConfiguration{{Metadata: api.ObjectMeta{Name: "default"},
		Spec: api.BGPConfigurationSpec{ListenPort: port, NodeToNodeMeshEnabled: &mesh}}}
	var peers []*api.BGPPeer
	if rrs > 0 {
		peers = append(peers, &api.BGPPeer{Metadata: api.ObjectMeta{Name: "rrs"},
			Spec: api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "rr == 'true'"}})
	}

	logger := logrus.New()
	logger.SetLevel(logrus.ErrorLevel)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	ctx, cancel := context.WithCancel(context.Background())
	var members []*member
	for _, n := range nodes {
		d := confd.Compute(confd.Input{NodeName: n.Metadata.Name, Nodes: nodes, Configs: configs, Peers: peers})
		if d.Problem != "" {
			b.Fatal(d.Problem)
		}
		m := &member{name: n.Metadata.Name}
		cfg := bgp.Config{NodeName: m.name, ListenAddresses: []string{d.Global.RouterID.String()},
			StateDir: b.TempDir(), Log: logger.WithField("node", m.name)}
		if n.Spec.BGP.RouteReflectorClusterID == "" {
			m.sink = bgptest.NewRecorder()
			cfg.RouteSink = m.sink
		}
		if m.sp, err = bgp.New(cfg); err != nil {
			b.Fatal(err)
		}
		go func() { _ = m.sp.Run(ctx) }()
		m.sp.SetGlobal(d.Global)
		m.sp.OnAffinitySnapshot(nil)
		var ps []bgp.Peer
		for _, p := range d.Peers {
			ps = append(ps, p.Peer)
		}
		m.sp.SetPeers(ps)
		members = append(members, m)
	}
	b.Cleanup(func() {
		cancel()
		for _, m := range members {
			_ = m.sp.Stop(context.Background())
		}
	})

	setup := time.Now()
	for _, m := range members {
		waitEstablished(b, m)
	}
	b.Logf("%d speakers, all sessions up in %s", len(members), time.Since(setup).Round(time.Millisecond))
	time.Sleep(settle)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perSpeaker := float64(after.HeapInuse+after.StackInuse-before.HeapInuse-before.StackInuse) / float64(len(members)) / (1 << 20)

	var receivers []*member
	var origins []*member
	for _, m := range members {
		if m.sink != nil {
			receivers = append(receivers, m)
			origins = append(origins, m)
		}
	}
	var lat []time.Duration
	i := 0
	sample := func() {
		origin := origins[i%len(origins)]
		block := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i/256), byte(i % 256), 0}), 26)
		i++
		t0 := time.Now()
		origin.sp.OnAffinityUpdate(bgp.Affinity{Node: origin.name, CIDR: block, State: bgp.AffinityConfirmed}, false)
		var last time.Time
		for _, r := range receivers {
			if r == origin {
				continue
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.sink.WaitFor(wctx, func(m map[netip.Prefix]netip.Addr) bool { _, ok := m[block]; return ok })
			wcancel()
			if err != nil {
				b.Fatalf("%s never learned %s from %s: %v", r.name, block, origin.name, err)
			}
			if t, _ := r.sink.FirstSeen(block); t.After(last) {
				last = t
			}
		}
		lat = append(lat, last.Sub(t0))
	}
	for b.Loop() {
		sample()
	}
	// Percentiles need samples even when run with -benchtime 1x (make
	// bench); the extra ones are outside the timed loop.
	for len(lat) < minSamples {
		sample()
	}
	runtime.GC()
	var end runtime.MemStats
	runtime.ReadMemStats(&end)
	perSpeakerEnd := float64(end.HeapInuse+end.StackInuse-before.HeapInuse-before.StackInuse) / float64(len(members)) / (1 << 20)
	if testing.Verbose() {
		b.Logf("first samples: %v", lat[:min(5, len(lat))])
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	// Heap of in-process speakers, not a node's memory: make scale
	// reports real routed processes' anonymous and file-backed memory.
	b.ReportMetric(perSpeaker, "heap-MiB/speaker")
	b.ReportMetric(perSpeakerEnd, "heap-MiB/speaker-with-routes")
}

func waitEstablished(b *testing.B, m *member) {
	b.Helper()
	testenv.Eventually(b, 60*time.Second, 50*time.Millisecond, func() string {
		ps, err := m.sp.Peers(context.Background())
		up := err == nil && len(ps) > 0
		for _, p := range ps {
			up = up && p.Established()
		}
		if !up {
			return fmt.Sprintf("%s: sessions never all came up: %+v (%v)", m.name, ps, err)
		}
		return ""
	})
}
