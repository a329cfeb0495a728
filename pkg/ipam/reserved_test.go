package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

func (e *env) reserve(name string, cidrs ...string) {
	e.t.Helper()
	r := &api.IPReservation{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPReservation},
		Metadata: api.ObjectMeta{Name: name},
		Spec:     api.IPReservationSpec{ReservedCIDRs: cidrs},
	}
	if err := r.Validate(); err != nil {
		e.t.Fatal(err)
	}
	e.apply(r)
}

// fill assigns addresses to node from c until the pools are exhausted and
// returns them; any other error fails the test.
func fill(t *testing.T, c *Client, node string, family int) []netip.Addr {
	t.Helper()
	var got []netip.Addr
	for i := 0; ; i++ {
		ips, err := c.AutoAssign(ctxT(t), AssignArgs{Node: node, HandleID: fmt.Sprintf("net.%s-%d", node, i), Family: family})
		if errors.Is(err, ErrExhausted) {
			return got
		}
		if err != nil {
			t.Fatalf("AutoAssign %d: %v", i, err)
		}
		got = append(got, ips...)
		if i > 1000 {
			t.Fatal("pool never exhausted")
		}
	}
}

func noneIn(t *testing.T, got []netip.Addr, reserved ...string) {
	t.Helper()
	seen := map[netip.Addr]bool{}
	for _, a := range got {
		if seen[a] {
			t.Errorf("%s handed out twice", a)
		}
		seen[a] = true
		for _, r := range reserved {
			p, err := netip.ParsePrefix(r)
			if err != nil {
				p = netip.PrefixFrom(netip.MustParseAddr(r), netip.MustParseAddr(r).BitLen())
			}
			if p.Contains(a) {
				t.Errorf("reserved address %s (reservation %s) handed out", a, r)
			}
		}
	}
}

// TestReservedSkippedWhenFilling fills a small pool (four blocks of four)
// with one address and one whole block reserved: every other address is
// handed out, the reserved ones never, and the reserved block is never
// claimed. IPv4 and IPv6.
func TestReservedSkippedWhenFilling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		family          int
		pool            string
		bs              int
		single, block   string
		blockKeyCIDR    string
		wantTotal, want int
	}{
		{4, "10.9.0.0/28", 30, "10.9.0.1", "10.9.0.4/30", "10.9.0.4/30", 16, 11},
		{6, "fd00:9::/124", 126, "fd00:9::1", "fd00:9::8/126", "fd00:9::8/126", 16, 11},
	} {
		t.Run(fmt.Sprintf("IPv%d", tc.family), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.pool("p", tc.pool, tc.bs)
			e.node("n1", nil)
			e.reserve("keep", tc.single, tc.block)
			c := New(e.ds)
			got := fill(t, c, "n1", tc.family)
			if len(got) != tc.want {
				t.Errorf("handed out %d addresses %v, want %d of %d (5 reserved)", len(got), got, tc.want, tc.wantTotal)
			}
			noneIn(t, got, tc.single, tc.block)
			resp, err := e.ds.Etcd().Get(ctxT(t), blockKey(pfx(tc.blockKeyCIDR)), clientv3.WithCountOnly())
			if err != nil || resp.Count != 0 {
				t.Errorf("the wholly reserved block %s was claimed (%v)", tc.blockKeyCIDR, err)
			}
			mustVerify(t, c)
		})
	}
}

// TestReservedWholeOwnBlockMovesOn: the node's block has free addresses,
// but all of them are reserved after it was claimed: the next pod gets
// an address from another block.
func TestReservedWholeOwnBlockMovesOn(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.2.0/28", 29, WithWatchedPools())
	e.node("n1", nil)
	first := assign(t, c, "n1", "net.a")
	blk := netip.PrefixFrom(first, 29).Masked()
	e.reserve("rest-of-block", blk.String())
	c.Invalidate() // what routed/cniserver does on the feed's IPReservation change
	second := assign(t, c, "n1", "net.b")
	if blk.Contains(second) {
		t.Fatalf("got %s from block %s whose free addresses are all reserved", second, blk)
	}
	mustVerify(t, c)
}

// TestReservationAddedLater: a reservation made after a client cached
// its view applies to its next assignments, for a client told of the
// change (Invalidate, as routed's CNI server is) and for one that is not
// (the write's guard on the reservations makes it read them again).
func TestReservationAddedLater(t *testing.T) {
	t.Parallel()
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watched=%v", watched), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.pool("p", "10.9.4.0/27", 27)
			e.node("n1", nil)
			var c *Client
			if watched {
				c = New(e.ds, WithWatchedPools())
			} else {
				c = New(e.ds)
			}
			before := assign(t, c, "n1", "net.before")
			// Reserve the first half of what is still free.
			e.reserve("later", "10.9.4.0/28")
			if watched {
				c.Invalidate()
			}
			var got []netip.Addr
			for i := range 8 {
				got = append(got, assign(t, c, "n1", fmt.Sprintf("net.after-%d", i)))
			}
			noneIn(t, got, "10.9.4.0/28")
			if len(fill(t, c, "n1", 4)) != 8 {
				t.Error("the unreserved half was not all handed out")
			}
			// Addresses held before the reservation stay held.
			if info, err := c.IPInfo(ctxT(t), before); err != nil || info == nil {
				t.Errorf("address %s held before the reservation: %v %v", before, info, err)
			}
			mustVerify(t, c)
		})
	}
}

// TestReservedConcurrentPods: nodes assigning at once never get a
// reserved address.
func TestReservedConcurrentPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.9.8.0/24", 28)
	reserved := []string{"10.9.8.0/29", "10.9.8.17", "10.9.8.48/28", "10.9.8.200/30"}
	e.reserve("a", reserved[:2]...)
	e.reserve("b", reserved[2:]...)
	var mu sync.Mutex
	var all []netip.Addr
	var wg sync.WaitGroup
	for n := range 4 {
		node := fmt.Sprintf("n%d", n)
		e.node(node, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := New(e.ds)
			for i := range 30 {
				ips, err := c.AutoAssign(context.Background(), AssignArgs{Node: node, HandleID: fmt.Sprintf("net.%s-%d", node, i)})
				if err != nil {
					t.Errorf("%s: %v", node, err)
					return
				}
				mu.Lock()
				all = append(all, ips...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(all) != 120 {
		t.Fatalf("%d addresses", len(all))
	}
	noneIn(t, all, reserved...)
	mustVerify(t, New(e.ds))
}

// TestReservedExplicitAssignAllowed: as in Calico, a reservation keeps
// an address from automatic assignment only; asking for it by name
// (AssignIP: a re-imported pod, an explicit request) gets it.
func TestReservedExplicitAssignAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.9.6.0/26", 26)
	e.node("n1", nil)
	e.reserve("gateway", "10.9.6.1")
	c := New(e.ds)
	if err := c.AssignIP(ctxT(t), mustParse("10.9.6.1"), "net.explicit", "n1", Attributes{}); err != nil {
		t.Fatalf("explicit assignment of a reserved address: %v", err)
	}
	got := fill(t, c, "n1", 4)
	if len(got) != 63 { // the 64 less the reserved one, held explicitly
		t.Errorf("%d more addresses, want 63", len(got))
	}
	noneIn(t, got, "10.9.6.1")
}

// TestReservedSetArithmetic covers the ordinals a reservation takes in a
// block, both families.
func TestReservedSetArithmetic(t *testing.T) {
	t.Parallel()
	s := reservedSet{{pfx("10.0.0.5/32"), "a"}, {pfx("10.0.0.8/30"), "b"}, {pfx("fd00::1:0/112"), "c"}, {pfx("fd00::2:40/122"), "d"}}
	if got := s.in(pfx("10.0.0.0/28")).ordinals(pfx("10.0.0.0/28")); len(got) != 5 || !got[5] || !got[8] || !got[11] {
		t.Errorf("v4 ordinals %v", got)
	}
	if !s.covers(pfx("fd00::1:40/122")) || s.covers(pfx("fd00::2:0/122")) || !s.covers(pfx("fd00::2:40/122")) {
		t.Error("v6 covers")
	}
	if got := s.holding(mustParse("10.0.0.10")); got != "b" {
		t.Errorf("holding = %q", got)
	}
	if s.in(pfx("10.0.1.0/26")) != nil {
		t.Error("unrelated block overlaps")
	}
	if got := strings.Join([]string{s.holding(mustParse("fd00::2:7f")), s.holding(mustParse("fd00::2:80"))}, ","); got != "d," {
		t.Errorf("v6 holding %q", got)
	}
}

// TestReservationsCostNoRequests: reservations ride on the pool view's
// read, so a node filling its blocks makes exactly as many etcd
// requests with reservations elsewhere in the pool as without any.
func TestReservationsCostNoRequests(t *testing.T) {
	t.Parallel()
	run := func(reserve bool) Stats {
		e := newEnv(t)
		e.pool("p", "10.9.16.0/22", 26)
		e.node("n1", nil)
		if reserve {
			e.reserve("far", "10.9.19.250", "10.9.19.128/28")
		}
		c := New(e.ds, WithWatchedPools())
		assign(t, c, "n1", "net.warm") // the first claim and view read
		before := c.Stats()
		for i := range 70 {
			assign(t, c, "n1", fmt.Sprintf("net.%d", i))
		}
		after := c.Stats()
		return Stats{Gets: after.Gets - before.Gets, Txns: after.Txns - before.Txns, Conflicts: after.Conflicts - before.Conflicts}
	}
	without, with := run(false), run(true)
	if with != without {
		t.Errorf("70 assignments: %+v with reservations, %+v without", with, without)
	}
	t.Logf("70 assignments (a second block claimed on the way): %+v", with)
}
