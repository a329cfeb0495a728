package bgp

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestReadinessNeedsConfiguration: BGP is not ready before confd has
// configured the speaker (it used to say ready with no peers set), then
// follows the sessions: all of them for a node, any one for a reflector.
// Established sessions are covered by the lab (tests/e2e TestFaults).
func TestReadinessNeedsConfiguration(t *testing.T) {
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	sp, err := New(Config{NodeName: "n1", ListenPort: -1, StateDir: t.TempDir(), Log: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := func(ready bool, detail string) {
		t.Helper()
		ok, d := sp.Readiness(ctx)
		if ok != ready || !strings.Contains(d, detail) {
			t.Errorf("Readiness() = %v %q, want %v %q", ok, d, ready, detail)
		}
	}
	want(false, "not configured yet")
	// confd says what stops it; status and readiness name it.
	sp.SetConfigProblem(`no Node resource "n1"`)
	want(false, `BGP not configured: no Node resource "n1"`)
	if p, err := sp.Process(ctx); err != nil || !p.PeersPending || p.ConfigProblem != `no Node resource "n1"` {
		t.Errorf("Process() = %+v (%v), want the sessions pending with the problem", p, err)
	}
	sp.SetConfigProblem("")
	sp.SetGlobal(Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1")})
	want(false, "sessions not configured yet")
	pending := func(want bool) {
		t.Helper()
		p, err := sp.Process(ctx)
		if err != nil || p.PeersPending != want {
			t.Errorf("Process().PeersPending = %v (%v), want %v", p.PeersPending, err, want)
		}
	}
	pending(true)
	sp.SetPeers(nil)
	want(true, "no BGP sessions configured")
	pending(false)
	peer := func(a string, client bool) Peer {
		return Peer{Address: netip.MustParseAddr(a), ASN: 64512, RRClient: client}
	}
	sp.SetPeers([]Peer{peer("10.0.0.2", false), peer("10.0.0.3", false)})
	want(false, "0 of 2 sessions established")
	sp.SetPeers([]Peer{peer("10.0.0.2", true), peer("10.0.0.3", true)})
	want(false, "route reflector: none of 2 sessions established")
}
