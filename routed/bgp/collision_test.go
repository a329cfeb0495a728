//go:build !race

// Two speakers in one process: left out of -race runs, as speaker_test.go
// is (GoBGP's StartBgp writes package variables every server reads).

package bgp

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// connCounter counts, from GoBGP's log lines, the connection attempts a
// speaker makes ("try to connect", connectLoop) and the connections it
// accepts and closes at once because its session is past Active
// ("Closed an accepted connection", "accepted conn is closed ...").
type connCounter struct{ dials, refused atomic.Int64 }

func (c *connCounter) Levels() []logrus.Level { return logrus.AllLevels }

func (c *connCounter) Fire(e *logrus.Entry) error {
	switch e.Message {
	case "try to connect":
		c.dials.Add(1)
	case "Closed an accepted connection", "accepted conn is closed to avoid be blocked":
		c.refused.Add(1)
	}
	return nil
}

type nopFormatter struct{}

func (nopFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

// collisionPairs is how many pairs TestSimultaneousOpen runs
// (ROUTED_COLLIDE_PAIRS overrides).
func collisionPairs() int {
	if n, err := strconv.Atoi(os.Getenv("ROUTED_COLLIDE_PAIRS")); err == nil && n > 0 {
		return n
	}
	return 40
}

// TestSimultaneousOpen: two speakers, both active, add each other at the
// same moment, so that each dials the other while accepting the other's
// connection (RFC 4271 6.8, a connection collision). Every pair must be
// Established on both sides within 3 s, and once it is, neither side may
// dial again: after the first keepalive each side receives, three more
// keepalives (1 s apart) pass with no new connection attempt and no
// connection accepted and refused on either side. Before the collision
// fix in third_party/gobgp (PATCHED.md, the third change) some pairs
// stayed in OpenConfirm for good and others redialled every 1.5-2 s.
func TestSimultaneousOpen(t *testing.T) {
	const (
		establishBound = 3 * time.Second
		parallel       = 8
	)
	n := collisionPairs()
	results := make([]pairResult, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = simultaneousOpenPair(t, establishBound)
		}()
	}
	wg.Wait()

	var stuck, redial int
	var took []time.Duration
	for i, r := range results {
		if r.err != "" {
			t.Errorf("pair %d: %s", i, r.err)
			if r.took == 0 {
				stuck++
			} else {
				redial++
			}
			continue
		}
		took = append(took, r.took)
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d pairs: established in %v (median) to %v (max)", len(took), took[len(took)/2], took[len(took)-1])
	}
	t.Logf("%d/%d pairs not established on both sides within %v, %d/%d established but still dialling or refusing after", stuck, n, establishBound, redial, n)
}

// pairResult is one pair's outcome: err is empty when the pair passed;
// took is how long both sides took to be Established, zero if they never
// were.
type pairResult struct {
	took time.Duration
	err  string
}

func simultaneousOpenPair(t *testing.T, bound time.Duration) (r pairResult) {
	// A pair of addresses of its own on loopback, one port for both.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return pairResult{err: err.Error()}
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	base := [3]byte{127, byte(100 + rand.IntN(100)), byte(rand.IntN(250))}
	counters := [2]*connCounter{{}, {}}
	nodes := [2]*collisionNode{}
	for k := range nodes {
		nodes[k] = newCollisionNode(t, netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(k + 1)}), port, counters[k])
	}
	peers := [2]Peer{}
	for k := range nodes {
		peers[k] = Peer{
			Address: nodes[1-k].addr, ASN: 64512, Port: port, Type: PeerTypeMesh, Name: "peer",
			LocalAddress: nodes[k].addr,
			Passive:      false, // both dial: the collision
			HoldTime:     3 * time.Second, KeepaliveTime: time.Second,
		}
	}
	peerOf := func(k int) (status.Peer, bool) {
		ps, _ := nodes[k].sp.Peers(context.Background())
		for _, p := range ps {
			if p.Address == nodes[1-k].addr.String() {
				return p, true
			}
		}
		return status.Peer{}, false
	}
	describe := func() string {
		s := ""
		for k := range nodes {
			p, _ := peerOf(k)
			s += fmt.Sprintf(" node%d: %s (sent %d, received %d; dials %d, refused %d)", k+1, p.BGPState, p.MessagesSent, p.MessagesReceived, counters[k].dials.Load(), counters[k].refused.Load())
		}
		return s
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	for k := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			nodes[k].sp.SetPeers([]Peer{peers[k]})
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	for {
		a, _ := peerOf(0)
		b, _ := peerOf(1)
		if a.Established() && b.Established() {
			r.took = time.Since(t0)
			break
		}
		if time.Since(t0) > bound {
			r.err = fmt.Sprintf("not established within %v:%s", bound, describe())
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The window: from each side's first keepalive after Established to
	// three more.
	received := func(base [2]uint64, more uint64) ([2]uint64, string) {
		deadline := time.Now().Add(10 * time.Second)
		var now [2]uint64
		for {
			done := true
			for k := range nodes {
				p, _ := peerOf(k)
				if !p.Established() {
					return now, "session dropped:" + describe()
				}
				now[k] = p.MessagesReceived
				if now[k] < base[k]+more {
					done = false
				}
			}
			if done {
				return now, ""
			}
			if time.Now().After(deadline) {
				return now, "keepalives stopped:" + describe()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var kept [2]uint64
	kept, r.err = received(kept, 0)
	if r.err == "" {
		kept, r.err = received(kept, 1)
	}
	if r.err != "" {
		return r
	}
	var dials, refused [2]int64
	for k := range nodes {
		dials[k], refused[k] = counters[k].dials.Load(), counters[k].refused.Load()
	}
	if _, r.err = received(kept, 3); r.err != "" {
		return r
	}
	for k := range nodes {
		if d, f := counters[k].dials.Load()-dials[k], counters[k].refused.Load()-refused[k]; d != 0 || f != 0 {
			r.err += fmt.Sprintf(" node%d dialled %d times and refused %d connections over three keepalives while Established;", k+1, d, f)
		}
	}
	if r.err != "" {
		r.err += describe()
	}
	return r
}

type collisionNode struct {
	sp   *Speaker
	addr netip.Addr
}

// newCollisionNode starts a speaker on addr whose GoBGP log lines go to
// counter only (at debug: GoBGP logs its dials there).
func newCollisionNode(t *testing.T, addr netip.Addr, port uint16, counter *connCounter) *collisionNode {
	logger := logrus.New()
	logger.SetLevel(logrus.DebugLevel)
	logger.SetOutput(io.Discard)
	logger.SetFormatter(nopFormatter{})
	logger.AddHook(counter)
	sink := bgptest.NewRecorder()
	sp, err := New(Config{
		NodeName: "node-" + addr.String(), ListenPort: int32(port),
		ListenAddresses: []string{addr.String()}, RouteSink: sink, RouteStatus: sink,
		StateDir: t.TempDir(), ConnectRetry: 2 * time.Second,
		Log: logger.WithField("node", addr.String()),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = sp.Stop(context.Background())
	})
	sp.SetGlobal(Global{ASN: 64512, RouterID: addr})
	sp.OnAffinitySnapshot(nil)
	return &collisionNode{sp: sp, addr: addr}
}
