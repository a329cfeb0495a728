//go:build !race

// GoBGP keeps route-selection options in package variables that every
// server's StartBgp writes, so several servers in one process race by
// design. routed runs one speaker per process; these tests run several
// in this process and are left out of -race runs. Under -race the
// integration tests cover the same code, one speaker per (race-enabled)
// child process.

package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// These tests run speakers in this process on loopback addresses
// (127.x.y.z are all local), each listening on its own address and one
// shared free port, so no namespace or root is needed.

type loopLab struct {
	t    *testing.T
	base [3]byte
	port uint16
}

func newLoopLab(t *testing.T) *loopLab {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return &loopLab{t: t, base: [3]byte{127, byte(100 + rand.IntN(100)), byte(rand.IntN(250))}, port: port}
}

func (l *loopLab) addr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{l.base[0], l.base[1], l.base[2], byte(i)})
}

type testNode struct {
	sp   *Speaker
	sink *bgptest.Recorder
	addr netip.Addr
}

func (l *loopLab) speaker(i int, asn uint32) *testNode {
	return l.speakerWith(i, asn, nil)
}

// speakerWith is speaker with a last say over the Config.
func (l *loopLab) speakerWith(i int, asn uint32, edit func(*Config)) *testNode {
	t := l.t
	sink := bgptest.NewRecorder()
	logger := logrus.New()
	logger.SetLevel(testLogLevel)
	a := l.addr(i)
	cfg := Config{
		NodeName: fmt.Sprintf("node%d", i), ListenPort: int32(l.port),
		ListenAddresses: []string{a.String()}, RouteSink: sink, RouteStatus: sink,
		StateDir: t.TempDir(), ConnectRetry: 2 * time.Second,
		Log: logger.WithField("node", i),
	}
	if edit != nil {
		edit(&cfg)
	}
	sp := runSpeaker(t, cfg, Global{ASN: asn, RouterID: a})
	return &testNode{sp: sp, sink: sink, addr: a}
}

func (l *loopLab) peerOf(n *testNode, asn uint32, typ string) Peer {
	return Peer{Address: n.addr, ASN: asn, Port: l.port, Type: typ, Name: "peer", LocalAddress: netip.Addr{}}
}

func meshPeer(l *loopLab, local, remote *testNode, asn uint32) Peer {
	p := l.peerOf(remote, asn, PeerTypeMesh)
	p.LocalAddress = local.addr
	p.Passive = local.addr.Compare(remote.addr) > 0 // as confd sets it between nodes
	return p
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func waitPeer(t *testing.T, sp *Speaker, addr netip.Addr, cond func(status.Peer) bool) status.Peer {
	t.Helper()
	var found status.Peer
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		ps, err := sp.Peers(context.Background())
		if err != nil {
			return err.Error()
		}
		for _, p := range ps {
			if p.Address == addr.String() && cond(p) {
				found = p
				return ""
			}
		}
		return fmt.Sprintf("peer %s never matched; last %+v", addr, ps)
	})
	return found
}

func established(p status.Peer) bool { return p.Established() }

func TestMeshAdvertiseAndWithdraw(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})

	block := netip.MustParsePrefix("10.65.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: block, State: AffinityConfirmed}, false)
	// Not ours, not confirmed: neither is advertised.
	a.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: netip.MustParsePrefix("10.65.2.0/26"), State: AffinityConfirmed}, false)
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: netip.MustParsePrefix("10.65.3.0/26"), State: AffinityPending}, false)
	a.sp.SetBorrowedIPs([]netip.Addr{netip.MustParseAddr("10.65.9.7")})

	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), func(m map[netip.Prefix]netip.Addr) bool {
		return bgptest.Has(block, a.addr)(m) && bgptest.Has(netip.MustParsePrefix("10.65.9.7/32"), a.addr)(m)
	}); err != nil {
		t.Fatal(err)
	}
	if got := b.sink.Routes(); len(got) != 2 {
		t.Fatalf("b learned %v, want the block and the borrowed /32 only", got)
	}
	if len(a.sink.Routes()) != 0 {
		t.Fatalf("a learned %v from b, which advertises nothing", a.sink.Routes())
	}

	p := waitPeer(t, b.sp, a.addr, established)
	if p.Type != PeerTypeMesh || p.Info != "Established" || p.PeerASN != 64512 || p.Accepted != 2 {
		t.Fatalf("status of a at b: %+v", p)
	}
	routes, err := b.sp.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 2 || routes[0].Peer != a.addr.String() || routes[0].Programmed == nil || !*routes[0].Programmed {
		t.Fatalf("b's RIB: %+v", routes)
	}

	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: block, State: AffinityPendingDeletion}, false)
	if err := b.sink.WaitFor(ctxT(t, 10*time.Second), bgptest.Lacks(block)); err != nil {
		t.Fatal(err)
	}
	routes, _ = a.sp.Routes(context.Background())
	if len(routes) != 1 || !routes[0].Local || routes[0].Prefix != "10.65.9.7/32" {
		t.Fatalf("a's RIB after release: %+v", routes)
	}
}

func TestInfoConnectionRefused(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a := l.speaker(1, 64512)
	nobody := &testNode{addr: l.addr(9)}
	a.sp.SetPeers([]Peer{meshPeer(l, a, nobody, 64512)})
	p := waitPeer(t, a.sp, nobody.addr, func(p status.Peer) bool { return strings.Contains(p.Info, "no BGP connection yet") })
	if p.State != status.StateStart || !strings.HasPrefix(p.Info, "Active: no BGP connection yet") {
		t.Fatalf("peer status %+v", p)
	}
}

func TestInfoBadPeerAS(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64513)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)}) // b is really AS 64513
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	// GoBGP v4 reports the side that receives the bad OPEN only as not
	// connected; the side whose OPEN is refused says why.
	p := waitPeer(t, b.sp, a.addr, func(p status.Peer) bool { return strings.Contains(p.Info, "rejected our OPEN") })
	t.Logf("b sees a: %s", p.Info)
}

func TestLabelChangeKeepsSession(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	pa := meshPeer(l, a, b, 64512)
	a.sp.SetPeers([]Peer{pa})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	up := waitPeer(t, a.sp, b.addr, established)

	pa.Type, pa.Name = PeerTypeRouteReflector, "rr-peers"
	a.sp.SetPeers([]Peer{pa})
	got := waitPeer(t, a.sp, b.addr, func(p status.Peer) bool { return p.Type == PeerTypeRouteReflector })
	if !got.Established() || !got.Since.Equal(up.Since) {
		t.Fatalf("relabelling reset the session: before %+v after %+v", up, got)
	}

	pa.HoldTime, pa.KeepaliveTime = 30*time.Second, 10*time.Second // timers: updated in place
	a.sp.SetPeers([]Peer{pa})
	// Wait for GoBGP to hold the new timers (the change applied), then
	// check the session was not reset for it.
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		var hold uint64
		err := a.sp.srv().ListPeer(context.Background(), &api.ListPeerRequest{Address: b.addr.String()}, func(p *api.Peer) {
			if p.GetTimers().GetConfig() != nil {
				hold = p.GetTimers().GetConfig().GetHoldTime()
			}
		})
		if err != nil || hold != 30 {
			return fmt.Sprintf("GoBGP's hold time for b: %d (%v), want 30", hold, err)
		}
		return ""
	})
	got = waitPeer(t, a.sp, b.addr, func(status.Peer) bool { return true })
	if !got.Established() || !got.Since.Equal(up.Since) {
		t.Fatalf("changing timers reset the session: before %+v after %+v", up, got)
	}

	a.sp.SetPeers(nil)
	waitPeer(t, b.sp, a.addr, func(p status.Peer) bool { return !p.Established() })
	if ps, _ := a.sp.Peers(context.Background()); len(ps) != 0 {
		t.Fatalf("a still lists %+v", ps)
	}
}

var testLogLevel = func() logrus.Level {
	if l, err := logrus.ParseLevel(os.Getenv("ROUTED_TEST_LOG")); err == nil {
		return l
	}
	return logrus.WarnLevel
}()

// TestKeepOriginalNextHop: b passes a's block to its eBGP peer c; with
// keepOriginalNextHop the next hop stays a, otherwise it becomes b.
func TestKeepOriginalNextHop(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b, c := l.speaker(1, 64512), l.speaker(2, 64512), l.speaker(3, 65000)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	toC := meshPeer(l, b, c, 65000)
	toC.Type = PeerTypeGlobal
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512), toC})
	c.sp.SetPeers([]Peer{meshPeer(l, c, b, 64512)})
	block := netip.MustParsePrefix("10.65.1.0/26")
	own := netip.MustParsePrefix("10.65.2.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: block, State: AffinityConfirmed}, false)
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: own, State: AffinityConfirmed}, false)
	// By default an eBGP peer gets only b's own block, from b: a block b
	// merely learned would draw traffic for node1 through node2.
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(own, b.addr)); err != nil {
		t.Fatalf("own block to eBGP peer: %v", err)
	}
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(block, a.addr)); err != nil {
		t.Fatalf("b never learned a's block: %v", err)
	}
	if err := c.sink.WaitFor(ctxT(t, 3*time.Second), bgptest.Has(block, b.addr)); err == nil {
		t.Fatal("a learned block was re-advertised to the eBGP peer with next hop self")
	}
	toC.KeepOriginalNextHop = true
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512), toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(block, a.addr)); err != nil {
		t.Fatalf("keepOriginalNextHop: %v", err)
	}
	toC.KeepOriginalNextHop = false
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512), toC})
	if err := c.sink.WaitFor(ctxT(t, 90*time.Second), bgptest.Lacks(block)); err != nil {
		t.Fatalf("keepOriginalNextHop off again: learned block still sent: %v", err)
	}
	if err := c.sink.WaitFor(ctxT(t, 5*time.Second), bgptest.Has(own, b.addr)); err != nil {
		t.Fatalf("own block lost: %v", err)
	}
}

// TestIdentityChangeRestartsBGP: a new AS number restarts BGP; routes
// learned before are withdrawn from the sink, our own are re-advertised.
func TestIdentityChangeRestartsBGP(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	// b's restart sends a a Hard Reset, and a drops b's routes at once.
	// GoBGP closes the socket right after writing it, and when the
	// socket still holds unread data the kernel resets the connection
	// and the NOTIFICATION can be lost (CI saw it under load): a then
	// keeps b's routes as stale for b's restart time, as graceful restart
	// says it must. Five seconds keeps that case inside the waits below.
	short := func(c *Config) { c.RestartTime = 5 * time.Second }
	a, b := l.speakerWith(1, 64512, short), l.speakerWith(2, 64512, short)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	blockA, blockB := netip.MustParsePrefix("10.65.1.0/26"), netip.MustParsePrefix("10.65.2.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: blockA, State: AffinityConfirmed}, false)
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: blockB, State: AffinityConfirmed}, false)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(blockA, a.addr)); err != nil {
		t.Fatal(err)
	}
	b.sp.SetGlobal(Global{ASN: 64513, RouterID: b.addr}) // a still expects 64512: the session cannot come back
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(blockA)); err != nil {
		t.Fatalf("learned route kept after the BGP restart: %v", err)
	}
	if err := a.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(blockB)); err != nil {
		t.Fatal(err)
	}
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64513)})
	if err := a.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(blockB, b.addr)); err != nil {
		t.Fatalf("b's block not re-advertised after the restart: %v", err)
	}
	// The status view follows the restart; wait for it rather than
	// sample it once.
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() string {
		if p, _ := b.sp.Process(context.Background()); p.ASN != 64513 {
			return fmt.Sprintf("process %+v, want AS 64513 after the restart", p)
		}
		return ""
	})
}

// TestBindRouterID: with Calico's bindMode NodeIP the speaker listens on
// its router ID only; other local addresses refuse BGP connections.
func TestBindRouterID(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	logger := logrus.New()
	logger.SetLevel(testLogLevel)
	sp, err := New(Config{NodeName: "bind", ListenPort: int32(l.port), StateDir: t.TempDir(), Log: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	sp.SetGlobal(Global{ASN: 64512, RouterID: l.addr(1), BindRouterID: true})
	sp.SetPeers(nil)
	dial := func(a netip.Addr) error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(a, l.port).String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		if err := dial(l.addr(1)); err != nil {
			return "BGP never listened on the router ID: " + err.Error()
		}
		return ""
	})
	if err := dial(l.addr(2)); err == nil {
		t.Fatal("BGP answered on another local address with bindMode NodeIP")
	}
}

// TestOwnRoutesOnlyForPeerAddedLater: an eBGP peer configured after the
// first one is limited to the node's own routes too. GoBGP's policies
// keep the neighbor set they were made with, so a replaced set never
// reached them and the second peer got every learned route.
func TestOwnRoutesOnlyForPeerAddedLater(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	c, d := l.speaker(3, 65000), l.speaker(4, 65001)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	toC, toD := meshPeer(l, b, c, 65000), meshPeer(l, b, d, 65001)
	toC.Type, toD.Type = PeerTypeGlobal, PeerTypeGlobal
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512), toC})
	c.sp.SetPeers([]Peer{meshPeer(l, c, b, 64512)})
	d.sp.SetPeers([]Peer{meshPeer(l, d, b, 64512)})
	block := netip.MustParsePrefix("10.65.1.0/26")
	own := netip.MustParsePrefix("10.65.2.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: block, State: AffinityConfirmed}, false)
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: own, State: AffinityConfirmed}, false)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(block, a.addr)); err != nil {
		t.Fatalf("b never learned a's block: %v", err)
	}
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(own, b.addr)); err != nil {
		t.Fatalf("own block to the first eBGP peer: %v", err)
	}
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512), toC, toD})
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(own, b.addr)); err != nil {
		t.Fatalf("own block to the second eBGP peer: %v", err)
	}
	// A block b claims now is sent after anything b sent d before: once
	// d has it, a learned block sent to d would have arrived too.
	later := netip.MustParsePrefix("10.65.3.0/26")
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: later, State: AffinityConfirmed}, false)
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, b.addr)); err != nil {
		t.Fatalf("later own block to the second eBGP peer: %v", err)
	}
	for _, n := range []*testNode{c, d} {
		if _, ok := n.sink.Routes()[block]; ok {
			t.Errorf("eBGP peer %s got a block b only learned (next hop self)", n.addr)
		}
	}
}

// TestWorkloadRoutesStayOnTheNode: what a pod peering with its node
// (a NoAdvertise session, confd's localWorkloadSelector) advertises
// reaches the node's RouteSink but none of its other peers: not its iBGP
// mesh peer, not an eBGP peer that gets learned routes
// (keepOriginalNextHop), as Calico's BIRD exports it to nobody. A route
// the node learns later from an ordinary eBGP peer reaches both, so
// once they have it, the pod's route would have reached them first.
// The mark follows the session's setting both ways.
func TestWorkloadRoutesStayOnTheNode(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	c, w, d := l.speaker(3, 65000), l.speaker(4, 65100), l.speaker(5, 65001)
	toC, toD := meshPeer(l, a, c, 65000), meshPeer(l, a, d, 65001)
	toC.Type, toD.Type = PeerTypeGlobal, PeerTypeGlobal
	toC.KeepOriginalNextHop = true
	toW := meshPeer(l, a, w, 65100)
	toW.Type, toW.Passive, toW.Multihop, toW.NoAdvertise = PeerTypeLocalWorkload, true, true, true
	aPeers := func() []Peer { return []Peer{meshPeer(l, a, b, 64512), toC, toW, toD} }
	a.sp.SetPeers(aPeers())
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	c.sp.SetPeers([]Peer{meshPeer(l, c, a, 64512)})
	d.sp.SetPeers([]Peer{meshPeer(l, d, a, 64512)})
	podToNode := meshPeer(l, w, a, 64512)
	podToNode.Passive = false // the pod dials
	w.sp.SetPeers([]Peer{podToNode})

	podRoute := netip.MustParsePrefix("203.0.113.0/24")
	w.sp.SetServiceCIDRs([]netip.Prefix{podRoute})
	if err := a.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(podRoute, w.addr)); err != nil {
		t.Fatalf("the node never learned the pod's route: %v", err)
	}
	marker := netip.MustParsePrefix("198.51.100.0/24")
	d.sp.SetServiceCIDRs([]netip.Prefix{marker})
	for _, n := range []*testNode{b, c} {
		var snap map[netip.Prefix]netip.Addr
		if err := n.sink.WaitFor(ctxT(t, 20*time.Second), func(m map[netip.Prefix]netip.Addr) bool {
			snap = maps.Clone(m)
			return bgptest.Has(marker, d.addr)(m)
		}); err != nil {
			t.Fatalf("%s never got the route the node learned from an eBGP peer: %v", n.addr, err)
		}
		if nh, ok := snap[podRoute]; ok {
			t.Errorf("%s got the pod's route (next hop %s) beside %s: %v", n.addr, nh, marker, snap)
		}
	}

	// Not marked any more: the routes the pod sent are judged again and
	// sent on; marked again, they are withdrawn. The session stays.
	p := waitPeer(t, a.sp, w.addr, established)
	toW.NoAdvertise = false
	a.sp.SetPeers(aPeers())
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(podRoute, w.addr)); err != nil {
		t.Fatalf("NoAdvertise off: the mesh peer never got the pod's route: %v", err)
	}
	toW.NoAdvertise = true
	a.sp.SetPeers(aPeers())
	for _, n := range []*testNode{b, c} {
		if err := n.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(podRoute)); err != nil {
			t.Fatalf("NoAdvertise on again: %s still has the pod's route: %v", n.addr, err)
		}
	}
	if _, ok := a.sink.Routes()[podRoute]; !ok {
		t.Fatal("NoAdvertise on again: the node lost the pod's route")
	}
	if q := waitPeer(t, a.sp, w.addr, established); !q.Since.Equal(p.Since) {
		t.Errorf("the pod's session was reset (since %v, then %v): a soft reset should do", p.Since, q.Since)
	}
}

// TestRemovedSessionKeepsOwnRoutesOnly: an eBGP session being removed
// keeps routed's own-routes-only policy until it is gone. A route the
// node learns just before the session is deleted (here while a hook
// holds the removal) does not reach that peer. Before, the policy was
// lifted first (the peer was its only eBGP peer: the policy went), and
// the peer got the learned route until its session went down (or for as
// long as the removal failed).
func TestRemovedSessionKeepsOwnRoutesOnly(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b, d := l.speaker(1, 64512), l.speaker(2, 64512), l.speaker(4, 65001)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	toD := meshPeer(l, b, d, 65001)
	toD.Type = PeerTypeGlobal
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512), toD})
	d.sp.SetPeers([]Peer{meshPeer(l, d, b, 64512)})
	own, learned := netip.MustParsePrefix("10.75.2.0/26"), netip.MustParsePrefix("10.75.1.0/26")
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: own, State: AffinityConfirmed}, false)
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(own, b.addr)); err != nil {
		t.Fatalf("d never got b's own block: %v", err)
	}
	waitPeer(t, b.sp, a.addr, established)
	var held atomic.Bool
	hold := func(peer netip.Addr) {
		if peer != d.addr {
			return
		}
		held.Store(true)
		a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: learned, State: AffinityConfirmed}, false)
		if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(learned, a.addr)); err != nil {
			t.Errorf("b never learned a's block: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // time to reach d, if it may
	}
	b.sp.removeHook.Store(&hold)
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	waitPeer(t, d.sp, b.addr, func(p status.Peer) bool { return !p.Established() })
	if !held.Load() {
		t.Fatal("the removal was not held")
	}
	_, has := d.sink.Routes()[learned]
	if n := d.sink.Withdrawals()[learned]; has || n > 0 {
		t.Fatalf("d, being removed, got %s which b only learned (held now: %v, withdrawn %d times)", learned, has, n)
	}
}

// keepNHLab is node b (AS 64512) with iBGP peer a and eBGP peer d (AS
// 65001; b's sessions toA and toD, the latter with keep), d holding
// b's own block; GoBGP on b refuses to put policy in its export list
// while the returned flag is set (counted).
func keepNHLab(t *testing.T, keep bool, policy string) (a, b, d *testNode, toA, toD Peer, refuse *atomic.Bool, refusals *atomic.Int32) {
	l := newLoopLab(t)
	a, b, d = l.speaker(1, 64512), l.speaker(2, 64512), l.speaker(4, 65001)
	refuse, refusals = new(atomic.Bool), new(atomic.Int32)
	fail := func(name string) error {
		if name == policy && refuse.Load() {
			refusals.Add(1)
			return errors.New("injected failure")
		}
		return nil
	}
	b.sp.failAssign.Store(&fail)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	toA, toD = meshPeer(l, b, a, 64512), meshPeer(l, b, d, 65001)
	toD.Type, toD.KeepOriginalNextHop = PeerTypeGlobal, keep
	b.sp.SetPeers([]Peer{toA, toD})
	d.sp.SetPeers([]Peer{meshPeer(l, d, b, 64512)})
	own := netip.MustParsePrefix("10.76.2.0/26")
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: own, State: AffinityConfirmed}, false)
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(own, b.addr)); err != nil {
		t.Fatalf("d never got b's own block: %v", err)
	}
	waitPeer(t, b.sp, a.addr, established)
	return a, b, d, toA, toD, refuse, refusals
}

// refusedTwice waits until GoBGP refused the policy twice: two passes
// ran with it failing.
func refusedTwice(t *testing.T, refusals *atomic.Int32) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if refusals.Load() < 2 {
			return "the policy was never refused twice"
		}
		return ""
	})
}

// learnedNeverReaches has a originate a block b learns, and checks that
// it never reached d (neither held nor withdrawn there); it returns the
// block.
func learnedNeverReaches(t *testing.T, a, b, d *testNode, while string) netip.Prefix {
	t.Helper()
	learned := netip.MustParsePrefix("10.76.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: learned, State: AffinityConfirmed}, false)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(learned, a.addr)); err != nil {
		t.Fatalf("b never learned a's block: %v", err)
	}
	// A block b originates after it reaches d behind anything b sent
	// d before (one session, in order): then the learned one had its
	// chance.
	later := netip.MustParsePrefix("10.76.3.0/26")
	b.sp.OnAffinityUpdate(Affinity{Node: "node2", CIDR: later, State: AffinityConfirmed}, false)
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, b.addr)); err != nil {
		t.Fatalf("%s never got b's later block: %v", while, err)
	}
	nh, has := d.sink.Routes()[learned]
	if n := d.sink.Withdrawals()[learned]; has || n > 0 {
		t.Fatalf("%s got %s, which b only learned (next hop %v, b is %v; withdrawn %d times); export list %v",
			while, learned, nh, b.addr, n, globalPolicies(b, exportDir))
	}
	return learned
}

// TestKeepNextHopRefusedKeepsOwnRoutesOnly: an eBGP peer given
// keepOriginalNextHop leaves the own-routes-only set only once its
// keep-next-hop policy is installed. While GoBGP refuses that policy
// the peer gets no route the node merely learned; before, it was taken
// off routed-ebgp-own-routes all the same (here the policy went, d was
// its only member) and got every learned route with this node as next
// hop for as long as the refusal lasted. Once the policy is in, d gets
// learned routes with their original next hop.
func TestKeepNextHopRefusedKeepsOwnRoutesOnly(t *testing.T) {
	t.Parallel()
	a, b, d, toA, toD, refuse, refusals := keepNHLab(t, false, keepNHPolicy)
	refuse.Store(true)
	toD.KeepOriginalNextHop = true
	b.sp.SetPeers([]Peer{toA, toD})
	refusedTwice(t, refusals)
	learned := learnedNeverReaches(t, a, b, d, "while keep-next-hop was refused, eBGP peer d")
	refuse.Store(false)
	if err := d.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(learned, a.addr)); err != nil {
		t.Fatalf("keep-next-hop installed at last: d never got the learned block from its origin: %v", err)
	}
	if names := globalPolicies(b, exportDir); !slices.Contains(names, keepNHPolicy) || slices.Contains(names, ownOnlyPolicy) {
		t.Fatalf("export list %v: want %s and no %s", names, keepNHPolicy, ownOnlyPolicy)
	}
}

// TestKeepNextHopLiftedAfterOwnRoutesOnly: an eBGP peer that loses
// keepOriginalNextHop keeps its keep-next-hop policy until it is in
// the own-routes-only set. While GoBGP refuses routed-ebgp-own-routes,
// a route the node learns reaches d as before the change, with its
// original next hop, never with this node's; before, keep-next-hop was
// lifted first and d got it with next hop self. Once the policy is in,
// d is down to the node's own routes, by a soft reset: its session
// stays up.
func TestKeepNextHopLiftedAfterOwnRoutesOnly(t *testing.T) {
	t.Parallel()
	a, b, d, toA, toD, refuse, refusals := keepNHLab(t, true, ownOnlyPolicy)
	up := waitPeer(t, b.sp, d.addr, established)
	refuse.Store(true)
	toD.KeepOriginalNextHop = false
	b.sp.SetPeers([]Peer{toA, toD})
	refusedTwice(t, refusals)
	learned := netip.MustParsePrefix("10.76.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: learned, State: AffinityConfirmed}, false)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(learned, a.addr)); err != nil {
		t.Fatalf("b never learned a's block: %v", err)
	}
	// As before the change, d gets it, with its original next hop.
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), func(m map[netip.Prefix]netip.Addr) bool { _, ok := m[learned]; return ok }); err != nil {
		t.Fatalf("d never got %s while own routes only was refused: %v", learned, err)
	}
	if nh := d.sink.Routes()[learned]; nh != a.addr {
		t.Fatalf("while own routes only was refused, eBGP peer d got %s with next hop %v (b is %v, the origin a %v); export list %v",
			learned, nh, b.addr, a.addr, globalPolicies(b, exportDir))
	}
	refuse.Store(false)
	if err := d.sink.WaitFor(ctxT(t, 90*time.Second), bgptest.Lacks(learned)); err != nil {
		t.Fatalf("own routes only installed at last: d still holds the learned block: %v", err)
	}
	if names := globalPolicies(b, exportDir); slices.Contains(names, keepNHPolicy) || !slices.Contains(names, ownOnlyPolicy) {
		t.Fatalf("export list %v: want %s and no %s", names, ownOnlyPolicy, keepNHPolicy)
	}
	// A soft reset withdrew it: the session was never dropped.
	if now := waitPeer(t, b.sp, d.addr, established); !now.Since.Equal(up.Since) {
		t.Fatalf("the session to d was reset (up since %v, now since %v); a soft reset out withdraws", up.Since, now.Since)
	}
}

// TestPeerMadeIBGPKeepsOwnRoutesOnlyMeanwhile: a peer whose BGPPeer
// turns it from eBGP into iBGP keeps the eBGP session's own-routes-only
// Reject until that session is replaced. Here GoBGP refuses another of
// routed's own policies (the no-advertise mark the change also asks
// for), so the sessions wait; a route the node learns meanwhile never
// reaches d. Before, d was taken off routed-ebgp-own-routes at once
// (its wanted settings are iBGP) and got it with this node as next hop
// on its still-eBGP session, for as long as the refusal lasted.
func TestPeerMadeIBGPKeepsOwnRoutesOnlyMeanwhile(t *testing.T) {
	t.Parallel()
	a, b, d, toA, toD, refuse, refusals := keepNHLab(t, false, noAdvertiseMarkPolicy)
	refuse.Store(true)
	toD.ASN, toD.NoAdvertise = 64512, true
	b.sp.SetPeers([]Peer{toA, toD})
	refusedTwice(t, refusals)
	learnedNeverReaches(t, a, b, d, "while its change waited, eBGP session d")
	if names := globalPolicies(b, exportDir); !slices.Contains(names, ownOnlyPolicy) {
		t.Fatalf("export list %v while d's eBGP session is up: want %s", names, ownOnlyPolicy)
	}
}

// TestUpdatedSessionJudgedAgain: a session updated from eBGP to iBGP
// (a local AS) keeps its old settings' policies until it is replaced
// (TestPeerMadeIBGPKeepsOwnRoutesOnlyMeanwhile); here the new session
// comes up before they go (a hook holds the pass 3 s after the
// sessions, as a failed pass and its backoff would), so it starts under
// the eBGP ones too: the empty-AS_PATH reject refuses the block d now
// sends over iBGP. Once the old policies are gone its routes are judged
// again and b learns the block; before, nothing re-read them and b
// never did.
func TestUpdatedSessionJudgedAgain(t *testing.T) {
	t.Parallel()
	_, b, d, toA, toD, _, _ := keepNHLab(t, false, "no policy refused")
	var once atomic.Bool
	hold := func() {
		if once.CompareAndSwap(false, true) {
			time.Sleep(3 * time.Second)
		}
	}
	// d's side: b is now AS 65001 too (meshPeer's, from toD's port).
	dToB := Peer{Address: b.addr, ASN: 65001, Port: toD.Port, Type: PeerTypeMesh, Name: "peer", LocalAddress: d.addr, Passive: d.addr.Compare(b.addr) > 0}
	d.sp.SetPeers([]Peer{dToB})
	b.sp.peersHook.Store(&hold)
	toD.LocalASN = 65001
	b.sp.SetPeers([]Peer{toA, toD})
	dBlock := netip.MustParsePrefix("10.76.4.0/26")
	d.sp.OnAffinityUpdate(Affinity{Node: "node4", CIDR: dBlock, State: AffinityConfirmed}, false)
	if err := b.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(dBlock, d.addr)); err != nil {
		t.Fatalf("b never learned d's block over the updated (iBGP) session: %v; import list %v", err, globalPolicies(b, importDir))
	}
}

// TestKeepNextHopLostWithTimers: an eBGP peer whose BGPPeer loses
// keepOriginalNextHop together with a timer (a change GoBGP makes in
// place, UpdatePeer, without a new session) is down to the node's own
// routes once the edit applied: the route the node learned and sent on
// with its original next hop is withdrawn from it. The session is not
// reset for it (the withdrawal is the soft reset out's, not a new
// session's empty table). Before Speaker.rejudge nothing re-sent the
// table: d kept the learned route for good.
func TestKeepNextHopLostWithTimers(t *testing.T) {
	t.Parallel()
	a, b, d, toA, toD, _, _ := keepNHLab(t, true, "no policy refused")
	learned := netip.MustParsePrefix("10.76.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: learned, State: AffinityConfirmed}, false)
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(learned, a.addr)); err != nil {
		t.Fatalf("d (keepOriginalNextHop) never got the learned block from its origin: %v", err)
	}
	up := waitPeer(t, b.sp, d.addr, established)
	toD.KeepOriginalNextHop, toD.HoldTime = false, 60*time.Second
	b.sp.SetPeers([]Peer{toA, toD})
	if err := d.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Lacks(learned)); err != nil {
		t.Fatalf("keepOriginalNextHop gone with a timer change: d still holds the block b only learned: %v; export list %v", err, globalPolicies(b, exportDir))
	}
	own := netip.MustParsePrefix("10.76.2.0/26")
	if nh, ok := d.sink.Routes()[own]; !ok || nh != b.addr {
		t.Fatalf("d lost b's own block (next hop %v, held %v)", nh, ok)
	}
	if now := waitPeer(t, b.sp, d.addr, established); !now.Since.Equal(up.Since) {
		t.Fatalf("the session to d was reset (up since %v, now since %v): the test needs it kept", up.Since, now.Since)
	}
}
