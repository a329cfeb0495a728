//go:build !race

package bgp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// TestNoExportCIDRs: blocks inside a no-export CIDR (Calico's
// disableBGPExport pool) reach no peer, the others do; lifting it
// advertises them, setting it again withdraws them, without a session
// reset. The no-export list mixes IPv4 and IPv6 CIDRs, as a dual-stack
// cluster's pools do (GoBGP keeps one family per prefix set).
func TestNoExportCIDRs(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	private := netip.MustParsePrefix("10.66.1.0/26")
	public := netip.MustParsePrefix("10.65.1.0/26")
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.66.0.0/16"), netip.MustParsePrefix("fd00:66::/48")})
	for _, p := range []netip.Prefix{public, private} {
		a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: p, State: AffinityConfirmed}, false)
	}
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(public, a.addr)); err != nil {
		t.Fatal(err)
	}
	if p := waitPeer(t, b.sp, a.addr, established); p.Accepted != 1 {
		t.Fatalf("b accepted %d routes from a, want 1 (the private block is not exported): %v", p.Accepted, b.sink.Routes())
	}
	since := waitPeer(t, a.sp, b.addr, established).Since

	a.sp.SetNoExportCIDRs(nil)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(private, a.addr)); err != nil {
		t.Fatalf("export allowed again: %v", err)
	}
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.66.0.0/16"), netip.MustParsePrefix("fd00:66::/48")})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(private)); err != nil {
		t.Fatalf("export disabled again: %v", err)
	}
	if got := b.sink.Routes(); got[public] != a.addr {
		t.Fatalf("the public block went too: %v", got)
	}
	if p := waitPeer(t, a.sp, b.addr, established); !p.Since.Equal(since) {
		t.Errorf("session reset (since %v, now %v)", since, p.Since)
	}
}
