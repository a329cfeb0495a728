package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/testenv"
)

func TestPathRoundTripIPv6(t *testing.T) {
	p := netip.MustParsePrefix("fd00:10:244::40/122")
	nh := netip.MustParseAddr("fd00:10::1")
	ap, err := apiPath(p, nh, "65000:100")
	if err != nil {
		t.Fatal(err)
	}
	if ap.Family != bgp.RF_IPv6_UC {
		t.Fatalf("family %s, want ipv6-unicast", ap.Family)
	}
	pi, err := parsePath(ap)
	if err != nil || pi.prefix != p || pi.nextHop != nh || pi.neighbor.IsValid() {
		t.Fatalf("%+v %v", pi, err)
	}
	// As GoBGP hands over a received IPv6 path: next hop in MP_REACH_NLRI
	// (global, then link-local).
	mp, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_IPv6_UC, []bgp.PathNLRI{{NLRI: ap.Nlri}}, nh, netip.MustParseAddr("fe80::1"))
	if err != nil {
		t.Fatal(err)
	}
	ap.Attrs = []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), mp}
	ap.PeerAddress = netip.MustParseAddr("fd00:10::9")
	if pi, err = parsePath(ap); err != nil || pi.nextHop != nh || pi.neighbor != ap.PeerAddress {
		t.Fatalf("received IPv6 path: %+v %v", pi, err)
	}
}

func TestHostPrefix(t *testing.T) {
	if got := hostPrefix(netip.MustParseAddr("10.0.0.1")); got != "10.0.0.1/32" {
		t.Fatal(got)
	}
	if got := hostPrefix(netip.MustParseAddr("fd00::1")); got != "fd00::1/128" {
		t.Fatal(got)
	}
	peers := []Peer{{Address: netip.MustParseAddr("fd00::9"), ASN: 65000}, {Address: netip.MustParseAddr("10.0.0.9"), ASN: 65000},
		{Address: netip.MustParseAddr("fd00::2"), ASN: 64512}}
	if got := ebgpPeers(peers, 64512, nil); !slices.Equal(got, []string{"10.0.0.9/32", "fd00::9/128"}) {
		t.Fatalf("eBGP neighbor set %v", got)
	}
}

// TestAPIPeerFamily: a session carries the unicast family of its
// address only, with graceful restart for that family.
func TestAPIPeerFamily(t *testing.T) {
	s := &Speaker{cfg: Config{RestartTime: 120 * time.Second}}
	for addr, afi := range map[string]api.Family_Afi{"10.0.0.2": api.Family_AFI_IP, "fd00::2": api.Family_AFI_IP6} {
		ap := s.apiPeer(Peer{Address: netip.MustParseAddr(addr), ASN: 64512, Password: "pw",
			LocalAddress: netip.MustParseAddr(map[bool]string{true: "fd00::1", false: "10.0.0.1"}[afi == api.Family_AFI_IP6])}, false)
		if len(ap.AfiSafis) != 1 || ap.AfiSafis[0].Config.Family.Afi != afi || ap.AfiSafis[0].Config.Family.Safi != api.Family_SAFI_UNICAST ||
			!ap.AfiSafis[0].MpGracefulRestart.Config.Enabled || !ap.GracefulRestart.Enabled || ap.Conf.AuthPassword != "pw" {
			t.Fatalf("peer %s: %v", addr, ap)
		}
	}
}

// startSpeaker runs a speaker that does not listen until the test ends.
func startSpeaker(t *testing.T, node string) *Speaker {
	t.Helper()
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	sp, err := New(Config{NodeName: node, ListenPort: -1, StateDir: t.TempDir(), Log: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = sp.Stop(context.Background()) })
	return sp
}

// waitLocalRoutes waits until sp originates exactly want ("prefix via
// next hop", IPv4 then IPv6).
func waitLocalRoutes(t *testing.T, sp *Speaker, what string, want ...string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		routes, err := sp.Routes(context.Background())
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, r := range routes {
			if r.Local {
				got = append(got, r.Prefix+" via "+r.NextHop)
			}
		}
		if !slices.Equal(got, want) {
			return fmt.Sprintf("%s: routes %q, want %q", what, got, want)
		}
		return ""
	})
}

var dualStackInputs = []Affinity{
	{Node: "n1", CIDR: netip.MustParsePrefix("10.65.1.0/26"), State: AffinityConfirmed},
	{Node: "n1", CIDR: netip.MustParsePrefix("fd00:10:244::40/122"), State: AffinityConfirmed},
	{Node: "n1", CIDR: netip.MustParsePrefix("fd00:10:244::80/122"), State: AffinityPending},
	{Node: "n2", CIDR: netip.MustParsePrefix("fd00:10:244::c0/122"), State: AffinityConfirmed},
}

var dualStackBorrowed = []netip.Addr{netip.MustParseAddr("10.65.2.7"), netip.MustParseAddr("fd00:10:244::c7")}

// TestDualStackOrigination: a speaker originates its IPv4 blocks and
// borrowed /32s with its IPv4 address as next hop and its IPv6 blocks
// and borrowed /128s with its IPv6 address; a new IPv6 address re-sends
// the IPv6 routes (no BGP restart); without an IPv6 address no IPv6
// route is originated.
func TestDualStackOrigination(t *testing.T) {
	sp := startSpeaker(t, "n1")
	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("fd00:10::1")})
	sp.OnAffinitySnapshot(dualStackInputs)
	sp.SetBorrowedIPs(dualStackBorrowed)
	sp.SetPeers(nil)
	waitLocalRoutes(t, sp, "dual stack",
		"10.65.1.0/26 via 10.0.0.1", "10.65.2.7/32 via 10.0.0.1",
		"fd00:10:244::40/122 via fd00:10::1", "fd00:10:244::c7/128 via fd00:10::1")

	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("fd00:10::2")})
	waitLocalRoutes(t, sp, "new IPv6 address",
		"10.65.1.0/26 via 10.0.0.1", "10.65.2.7/32 via 10.0.0.1",
		"fd00:10:244::40/122 via fd00:10::2", "fd00:10:244::c7/128 via fd00:10::2")

	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1")})
	waitLocalRoutes(t, sp, "IPv6 address gone", "10.65.1.0/26 via 10.0.0.1", "10.65.2.7/32 via 10.0.0.1")
}

// TestIPv6OnlyOrigination: a node without an IPv4 address runs BGP with
// a derived router ID and originates its IPv6 routes only (an IPv4 route
// would have no next hop).
func TestIPv6OnlyOrigination(t *testing.T) {
	sp := startSpeaker(t, "n1")
	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.200.0.1"), RouterIDDerived: true, IPv6: netip.MustParseAddr("fd00:10::1")})
	sp.OnAffinitySnapshot(dualStackInputs)
	sp.SetBorrowedIPs(dualStackBorrowed)
	sp.SetPeers(nil)
	waitLocalRoutes(t, sp, "IPv6-only node", "fd00:10:244::40/122 via fd00:10::1", "fd00:10:244::c7/128 via fd00:10::1")
	if proc, _ := sp.Process(context.Background()); proc.RouterID != "10.200.0.1" {
		t.Fatalf("process %+v", proc)
	}
}
