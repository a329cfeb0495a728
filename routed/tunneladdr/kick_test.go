package tunneladdr

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
)

// TestTunnelLoopFollowsPoolEvents: the tunnel address follows a pool
// change within seconds, through the shared feed (the loop's own
// re-check is ten minutes away).
func TestTunnelLoopFollowsPoolEvents(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	fd := feed.New(ds, feed.Options{})
	l := New(ds, ipam.New(ds), "n1", func() bool { return false })
	fd.Subscribe("tunnel", Kinds, l)
	done := make(chan struct{}, 2)
	go func() { _ = fd.Run(ctx); done <- struct{}{} }()
	go func() { _ = l.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })

	tunnel := func() string {
		r, err := ds.Get(context.Background(), api.KindNode, "n1")
		if err != nil {
			return err.Error()
		}
		return r.(*api.Node).Spec.BGP.IPv4IPIPTunnelAddr
	}
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := tunnel(); !ok(got); got = tunnel() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: tunnel address %q", what, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Always}\n")
	waitFor("after an IPIP pool appeared", func(s string) bool { return netip.MustParsePrefix("10.50.0.0/24").Contains(addrOrZero(s)) })
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Never}\n")
	waitFor("after the pool stopped IPIP", func(s string) bool { return s == "" })
}

func addrOrZero(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

func TestTunnelKickFilters(t *testing.T) {
	l := New(nil, nil, "n1", nil)
	pending := func() bool {
		select {
		case <-l.kick:
			return true
		default:
			return false
		}
	}
	l.OnBatch(feed.Batch{Updates: []feed.Update{{Kind: api.KindNode, Name: "n2"}}})
	if pending() {
		t.Error("another node's change woke the tunnel loop")
	}
	l.OnBatch(feed.Batch{Updates: []feed.Update{{Kind: api.KindNode, Name: "n1"}}})
	l.OnBatch(feed.Batch{Updates: []feed.Update{{Kind: api.KindIPPool, Name: "p"}}}) // coalesced
	if !pending() || pending() {
		t.Error("want exactly one pending wake-up after this node's and a pool's change")
	}
}
