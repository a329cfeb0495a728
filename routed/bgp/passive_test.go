//go:build !race

package bgp

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/status"
)

// TestPassiveDialsOnceAtStart: a passive peer makes one attempt when it
// is added, at once (third_party/gobgp/PATCHED.md), so a session forms
// even when the other side would dial only seconds later (calico-node's
// BIRD after a Cease, its connect delay time 2): here both sides are
// passive, and the one who is configured last dials.
func TestPassiveDialsOnceAtStart(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	toA, toB := meshPeer(l, b, a, 64512), meshPeer(l, a, b, 64512)
	toA.Passive, toB.Passive = true, true
	b.sp.SetPeers([]Peer{toA})
	waitPeer(t, b.sp, a.addr, func(status.Peer) bool { return true })
	start := time.Now()
	a.sp.SetPeers([]Peer{toB})
	waitPeer(t, a.sp, b.addr, established)
	waitPeer(t, b.sp, a.addr, established)
	t.Logf("two passive sides established in %s", time.Since(start).Round(time.Millisecond))
}

// TestPassiveDialsNoMore: after its one attempt a passive peer only
// waits, while an active one keeps dialling. Two listeners that close
// what they accept stand in for peers that are not ready; once the
// active peer's listener has seen its second connection (its retry,
// 1.5 to 2 s after the first), the passive peer's has seen one.
func TestPassiveDialsNoMore(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a := l.speaker(1, 64512)
	var passiveConns, activeConns atomic.Int32
	listen := func(i int, n *atomic.Int32) *testNode {
		ln, err := net.Listen("tcp", net.JoinHostPort(l.addr(i).String(), strconv.Itoa(int(l.port))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				c.Close()
			}
		}()
		return &testNode{addr: l.addr(i)}
	}
	passive, active := listen(7, &passiveConns), listen(8, &activeConns)
	toPassive, toActive := meshPeer(l, a, passive, 64512), meshPeer(l, a, active, 64512)
	toPassive.Passive, toActive.Passive = true, false
	a.sp.SetPeers([]Peer{toPassive, toActive})
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		if activeConns.Load() < 2 || passiveConns.Load() < 1 {
			return "the active peer has not dialled twice, or the passive one not once"
		}
		return ""
	})
	if n := passiveConns.Load(); n != 1 {
		t.Fatalf("the passive peer dialled %d times while the active one dialled %d", n, activeConns.Load())
	}
}
