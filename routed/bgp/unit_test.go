package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// TestDiagPeerEvents pins how GoBGP's peer events become INFO.
func TestDiagPeerEvents(t *testing.T) {
	const peer = "10.0.0.2"
	ev := func(addr string, st bgp.FSMState, r api.PeerState_DisconnectReason, msg string) *apiutil.WatchEventMessage_PeerEvent {
		return &apiutil.WatchEventMessage_PeerEvent{Type: apiutil.PEER_EVENT_STATE, Peer: apiutil.Peer{State: apiutil.PeerState{
			NeighborAddress: netip.MustParseAddr(addr), SessionState: st, DisconnectReason: r, DisconnectMessage: msg}}}
	}
	tests := []struct {
		name  string
		wasUp bool
		event *apiutil.WatchEventMessage_PeerEvent
		want  string
	}{
		{"notification received", false, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED,
			"notification-received code 2(open) subcode 2(bad peer as)"), "received notification: open: bad peer AS"},
		{"bad peer AS", false, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_BAD_PEER_AS, "bad-peer-as"),
			"sent notification: open: bad peer AS (check AS numbers on both sides)"},
		{"hard reset", true, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED,
			"notification-received code 6(cease) subcode 9(undefined)"), "received notification: cease: hard reset"},
		{"closed", false, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_READ_FAILED, "read-failed"), "connection closed by peer"},
		{"rejected open", false, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_INVALID_MSG, "invalid-msg"),
			"peer rejected our OPEN (check AS numbers on both sides)"},
		{"hold timer", true, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED, "hold-timer-expired"), "hold timer expired"},
		{"admin shutdown sent", true, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT,
			"notification-sent code 6(cease) subcode 2(administrative shutdown)"), "sent notification: cease: administrative shutdown"},
		{"BFD down", true, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED,
			"notification-received code 6(cease) subcode 10(undefined)"), "received notification: cease: BFD down"},
		{"hold timer notification", true, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED,
			"notification-received code 4(hold timer expired) subcode 0(undefined)"), "received notification: hold timer expired"},
		{"unknown code", true, ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED,
			"notification-received code 9(undefined) subcode 1(undefined)"), "received notification: code 9 subcode 1"},
		{"unknown peer", false, ev("10.9.9.9", bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_READ_FAILED, ""), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDiag()
			d.configure(peer, false)
			if tc.wasUp {
				d.onPeer(ev(peer, bgp.BGP_FSM_ESTABLISHED, 0, ""), time.Now())
			}
			d.onPeer(tc.event, time.Now())
			if got, _, _ := d.get(peer); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	d := newDiag()
	d.configure(peer, false)
	d.onPeer(ev(peer, bgp.BGP_FSM_IDLE, api.PeerState_DISCONNECT_REASON_READ_FAILED, ""), time.Now())
	_, before, _ := d.get(peer)
	d.onPeer(ev(peer, bgp.BGP_FSM_ESTABLISHED, 0, ""), time.Now())
	if got, since, _ := d.get(peer); got != "" || !since.After(before) {
		t.Fatalf("after Established: error %q kept, or since %v not moved", got, since)
	}
}

func TestPathRoundTrip(t *testing.T) {
	p := netip.MustParsePrefix("10.65.1.0/26")
	nh := netip.MustParseAddr("10.0.0.1")
	ap, err := apiPath(p, nh)
	if err != nil {
		t.Fatal(err)
	}
	pi, err := parsePath(ap)
	if err != nil || pi.prefix != p || pi.nextHop != nh || pi.neighbor.IsValid() || pi.withdraw {
		t.Fatalf("%+v %v", pi, err)
	}
	ap.PeerAddress, ap.Withdrawal = netip.MustParseAddr("10.0.0.9"), true
	if pi, _ = parsePath(ap); pi.neighbor != netip.MustParseAddr("10.0.0.9") || !pi.withdraw {
		t.Fatalf("%+v", pi)
	}
	if _, err := parsePath(&apiutil.Path{Family: bgp.RF_IPv4_VPN}); err == nil {
		t.Fatal("VPN path accepted")
	}
}

func TestFeeder(t *testing.T) {
	sink := bgptest.NewRecorder()
	f := newFeeder(sink, logrus.NewEntry(logrus.New()))
	p := netip.MustParsePrefix("10.65.1.0/26")
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	f.bestChanged(pathInfo{prefix: p, nextHop: a, neighbor: a})
	f.bestChanged(pathInfo{prefix: p, nextHop: a, neighbor: b}) // same next hop via an RR: no call
	f.bestChanged(pathInfo{prefix: p, nextHop: b, neighbor: b})
	if got := sink.Routes()[p]; got != b {
		t.Fatalf("route %v", got)
	}
	f.bestChanged(pathInfo{prefix: p, nextHop: a}) // our own path won: not a learned route
	if _, ok := sink.Routes()[p]; ok || sink.Withdrawals()[p] != 1 {
		t.Fatalf("local best path left the learned route in: %v", sink.Routes())
	}
	f.bestChanged(pathInfo{prefix: p, withdraw: true}) // already gone: no second withdraw
	if sink.Withdrawals()[p] != 1 {
		t.Fatal("withdrew twice")
	}
}

func TestSameSession(t *testing.T) {
	a := Peer{Address: netip.MustParseAddr("10.0.0.2"), ASN: 1, Type: PeerTypeMesh, Name: "b"}
	b := a
	b.Type, b.Name = PeerTypeRouteReflector, "rrs"
	if !sameSession(a, b) {
		t.Fatal("labels must not matter")
	}
	b.RRClient = true
	if sameSession(a, b) || sessionFingerprint(b) == sessionFingerprint(a) {
		t.Fatal("RR client flag must reset the session")
	}
}

// TestSingleSpeaker runs one speaker that does not listen and has no
// peers: routes are originated, status answers, and a planned stop
// leaves the restart marker that the next start reads.
func TestSingleSpeaker(t *testing.T) {
	dir := t.TempDir()
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	sp, err := New(Config{NodeName: "n1", ListenPort: -1, StateDir: dir, Log: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- sp.Run(ctx) }()
	go func() { done <- sp.Run(ctx) }()
	if err := <-done; !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run: %v", err)
	}
	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1")})
	sp.OnAffinitySnapshot([]Affinity{
		{Node: "n1", CIDR: netip.MustParsePrefix("10.65.1.0/26"), State: AffinityConfirmed},
		{Node: "n2", CIDR: netip.MustParsePrefix("10.65.2.0/26"), State: AffinityConfirmed},
	})
	sp.SetServiceCIDRs([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")})
	sp.SetPeers([]Peer{{Address: netip.MustParseAddr("10.0.0.9"), ASN: 65000, Type: PeerTypeGlobal, Name: "tor",
		ConfigError: "cannot read BGP password: open /x: no such file or directory"}})

	var routes []status.Route
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if routes, err = sp.Routes(context.Background()); err != nil || len(routes) != 2 {
			return fmt.Sprintf("routes %+v (%v), want 2", routes, err)
		}
		return ""
	})
	if len(routes) != 2 || routes[0].Prefix != "10.65.1.0/26" || !routes[0].Local || routes[0].NextHop != "10.0.0.1" ||
		routes[1].Prefix != "10.96.0.0/12" {
		t.Fatalf("routes %+v (%v)", routes, err)
	}
	// Routes are originated before sessions are configured in the same
	// pass: wait for the peer too.
	var peers []status.Peer
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if peers, err = sp.Peers(context.Background()); err != nil || len(peers) != 1 || peers[0].State != status.StateDown {
			return fmt.Sprintf("peers %+v (%v), want one down", peers, err)
		}
		return ""
	})
	if err != nil || len(peers) != 1 || peers[0].State != status.StateDown || !strings.Contains(peers[0].Info, "no such file") {
		t.Fatalf("peers %+v %v", peers, err)
	}
	proc, _ := sp.Process(context.Background())
	if proc.ASN != 64512 || proc.ListenPort != -1 || proc.Restarting || !proc.GracefulRestart {
		t.Fatalf("process %+v", proc)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, restartMarker)); err != nil {
		t.Fatalf("no restart marker after a planned stop: %v", err)
	}
	// The marker stays for the next start (a process that never runs
	// BGP passes it on), and counts only within the restart time.
	sp2 := &Speaker{cfg: Config{StateDir: dir, RestartTime: time.Minute}}
	if _, ok := sp2.detectRestart(); !ok {
		t.Fatal("a planned stop a moment ago is not seen as a restart")
	}
	if _, ok := sp2.detectRestart(); !ok {
		t.Fatal("the marker was used up by reading it")
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.WriteFile(filepath.Join(dir, restartMarker), []byte(strconv.FormatInt(old.UnixNano(), 10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := sp2.detectRestart(); ok {
		t.Fatal("a marker older than the restart time is seen as a restart")
	}
}

// TestRestartMarkerAfterAKill: a speaker that runs BGP records that it
// is alive, so a process killed without a planned stop is, at the next
// start, a restart (peers still hold its routes): the marker is there
// before any stop, and Stop (leaving for good) removes it.
func TestRestartMarkerAfterAKill(t *testing.T) {
	dir := t.TempDir()
	sp, err := New(Config{NodeName: "n1", ListenPort: -1, StateDir: dir, RestartTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1")})
	marker := filepath.Join(dir, restartMarker)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if _, err := os.Stat(marker); err != nil {
			return "BGP runs and no restart marker was written: a kill -9 would look like a cold start"
		}
		return ""
	})
	next := &Speaker{cfg: Config{StateDir: dir, RestartTime: time.Minute}}
	if alive, ok := next.detectRestart(); !ok || time.Since(alive) > 30*time.Second {
		t.Fatalf("the next start after a kill: restart %v, last alive %v", ok, alive)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := sp.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the node left for good and its restart marker stays: %v", err)
	}
}

// TestAPIPeerCalicoOptions: per-peer restart time, own-AS allowance and
// GTSM reach GoBGP's peer configuration.
func TestAPIPeerCalicoOptions(t *testing.T) {
	s := &Speaker{cfg: Config{RestartTime: 120 * time.Second}}
	ap := s.apiPeer(Peer{Address: netip.MustParseAddr("10.0.0.2"), ASN: 65000, RestartTime: 45 * time.Second, AllowOwnAS: 2, TTLHops: 1}, false)
	if ap.GracefulRestart.RestartTime != 45 || ap.Conf.AllowOwnAsn != 2 || !ap.TtlSecurity.GetEnabled() || ap.TtlSecurity.GetTtlMin() != 255 {
		t.Fatalf("%v", ap)
	}
	ap = s.apiPeer(Peer{Address: netip.MustParseAddr("10.0.0.2"), ASN: 65000}, false)
	if ap.GracefulRestart.RestartTime != 120 || ap.TtlSecurity != nil || ap.Conf.AllowOwnAsn != 0 || ap.EbgpMultihop != nil {
		t.Fatalf("defaults: %v", ap)
	}
	// A local workload's session: multihop, passive, no source address.
	ap = s.apiPeer(Peer{Address: netip.MustParseAddr("10.65.1.7"), ASN: 65100, Multihop: true, Passive: true}, false)
	if !ap.EbgpMultihop.GetEnabled() || ap.EbgpMultihop.GetMultihopTtl() != 255 || !ap.Transport.PassiveMode || ap.Transport.LocalAddress != "" {
		t.Fatalf("local workload: %v", ap)
	}
	// GTSM wins over multihop (GoBGP takes one or the other).
	ap = s.apiPeer(Peer{Address: netip.MustParseAddr("10.65.1.7"), ASN: 65100, Multihop: true, TTLHops: 2}, false)
	if ap.EbgpMultihop != nil || !ap.TtlSecurity.GetEnabled() {
		t.Fatalf("multihop with ttlSecurity: %v", ap)
	}
}

// notificationCode reads back every code and subcode GoBGP's own
// formatter writes into DisconnectMessage.
func TestNotificationCodeFromGoBGP(t *testing.T) {
	for code := 0; code < 10; code++ {
		for sub := 0; sub < 12; sub++ {
			msg := "notification-received " + bgp.NewNotificationErrorCode(uint8(code), uint8(sub)).String()
			c, s, ok := notificationCode(msg)
			if !ok || int(c) != code || int(s) != sub {
				t.Fatalf("%q: read %d/%d (ok %v), want %d/%d", msg, c, s, ok, code, sub)
			}
		}
	}
	if _, _, ok := notificationCode("read-failed"); ok {
		t.Error("a message without a code was read as one")
	}
}

// TestPathPriority: a path's LOCAL_PREF is read as Calico's route
// priority; one outside the range routed honours (GoBGP's, BIRD's and
// FRR's default 100) and none are the default priority. The node's own
// paths carry the default priority's LOCAL_PREF, as Calico nodes' do.
func TestPathPriority(t *testing.T) {
	ap, err := apiPath(netip.MustParsePrefix("10.65.1.0/26"), netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if pi, _ := parsePath(ap); pi.priority != 1024 {
		t.Fatalf("own path: priority %d, want 1024", pi.priority)
	}
	for _, c := range []struct{ lp, priority uint32 }{{2147483547, 100}, {2147482623, 1024}, {2147483647, 0}, {100, 1024}, {2147418112, 65535}, {2147418111, 1024}} {
		for i, a := range ap.Attrs {
			if _, ok := a.(*bgp.PathAttributeLocalPref); ok {
				ap.Attrs[i] = bgp.NewPathAttributeLocalPref(c.lp)
			}
		}
		if pi, _ := parsePath(ap); pi.priority != c.priority {
			t.Errorf("LOCAL_PREF %d: priority %d, want %d", c.lp, pi.priority, c.priority)
		}
	}
	ap.Attrs = ap.Attrs[:2] // origin, next hop
	if pi, _ := parsePath(ap); pi.priority != 1024 {
		t.Errorf("no LOCAL_PREF: priority %d, want 1024", pi.priority)
	}
}
