package policy_test

import (
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestCounterWatchLastHit: a rule's last hit is the read that first saw
// its counter grow; a counter that restarts (its chain was rewritten)
// and grows again is a hit; packets before the first read are "before".
func TestCounterWatchLastHit(t *testing.T) {
	cur := map[string]nftdp.Counter{"old": {Packets: 5}, "idle": {}}
	w := policy.NewCounterWatch(func() (map[string]nftdp.Counter, error) {
		out := map[string]nftdp.Counter{}
		for k, v := range cur {
			out[k] = v
		}
		return out, nil
	})
	t0 := time.Unix(1000, 0)
	get := func(now time.Time) map[string]policy.RuleCounter {
		t.Helper()
		rcs, err := w.Read(now)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]policy.RuleCounter{}
		for _, rc := range rcs {
			m[rc.ID] = rc
		}
		return m
	}
	m := get(t0)
	if !m["old"].HitBefore || !m["old"].LastHit.IsZero() || m["idle"].HitBefore || !w.WatchedSince.Equal(t0) {
		t.Fatalf("first read: %+v", m)
	}
	cur["idle"] = nftdp.Counter{Packets: 1, Bytes: 60}
	cur["new"] = nftdp.Counter{Packets: 2}
	t1 := t0.Add(10 * time.Second)
	m = get(t1)
	if !m["idle"].LastHit.Equal(t1) || !m["new"].LastHit.Equal(t1) || !m["old"].LastHit.IsZero() {
		t.Fatalf("second read: %+v", m)
	}
	t2 := t1.Add(10 * time.Second)
	m = get(t2)
	if !m["idle"].LastHit.Equal(t1) {
		t.Fatalf("unchanged counter moved its last hit: %+v", m["idle"])
	}
	cur["idle"] = nftdp.Counter{} // chain rewritten: the counter restarts
	m = get(t2.Add(time.Second))
	if !m["idle"].LastHit.Equal(t1) {
		t.Fatalf("a counter restarting at 0 is no hit: %+v", m["idle"])
	}
	cur["idle"] = nftdp.Counter{Packets: 1}
	t3 := t2.Add(2 * time.Second)
	if m = get(t3); !m["idle"].LastHit.Equal(t3) {
		t.Fatalf("restarted counter that grew: %+v", m["idle"])
	}
}

// TestCounterReaderLastHit: the read-only counter reader (felix's poll,
// on a socket of its own) sees the kernel's counters of the rule real
// traffic matched, and only that rule gets a last hit.
func TestCounterReaderLastHit(t *testing.T) {
	l := newLab(t)
	l.load(gnpOnB("hits", `[{action: Allow, protocol: TCP, destination: {ports: [8080]}}, {action: Allow, protocol: UDP}]`))
	l.apply()
	r, err := nftdp.NewCounterReader(l.node.Fd, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	w := policy.NewCounterWatch(r.Read)
	if _, err := w.Read(time.Now()); err != nil {
		t.Fatal(err)
	}
	l.expect("tcp allowed", pass("a", "b", "tcp", 8080))
	now := time.Now()
	rcs, err := w.Read(now)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]policy.RuleCounter{}
	for _, rc := range rcs {
		got[rc.ID] = rc
	}
	if c := got["pi-gnp:hits/0"]; c.Packets == 0 || !c.LastHit.Equal(now) {
		t.Errorf("rule 0: %+v, want packets and last hit %s", c, now)
	}
	if c := got["pi-gnp:hits/1"]; c.Packets != 0 || !c.LastHit.IsZero() {
		t.Errorf("rule 1 (UDP, no traffic): %+v", c)
	}
	dp, err := l.m.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if dp["pi-gnp:hits/0"].Packets != got["pi-gnp:hits/0"].Packets {
		t.Errorf("reader %+v and dataplane %+v disagree", got["pi-gnp:hits/0"], dp["pi-gnp:hits/0"])
	}
}
