package flowrec

import (
	"testing"
	"time"
)

// TestDueQueue: entries come out when due, in order; one queued with an
// earlier time than the entry before it comes out with that entry; an
// entry whose connection moved to another generation (decided,
// suppressed or forgotten since) never comes out; compaction keeps the
// live entries in order and trimming gives the room back.
func TestDueQueue(t *testing.T) {
	t0 := time.Now()
	var d dueQueue
	ps := make([]*pending, 6)
	for i := range ps {
		ps[i] = &pending{gen: uint64(i)}
	}
	d.push(ps[0], t0.Add(10*time.Millisecond))
	d.push(ps[1], t0.Add(20*time.Millisecond))
	d.push(ps[2], t0.Add(15*time.Millisecond)) // out of order: due with ps[1]
	d.push(ps[3], t0.Add(30*time.Millisecond))
	ps[3].gen++ // decided before its grace ended
	d.push(ps[4], t0.Add(40*time.Millisecond))

	pop := func(now time.Duration) []*pending {
		var out []*pending
		for {
			p, ok := d.pop(t0.Add(now), atOrAfterDue)
			if !ok {
				return out
			}
			out = append(out, p)
		}
	}
	if got := pop(5 * time.Millisecond); len(got) != 0 {
		t.Fatalf("at 5 ms: %d due", len(got))
	}
	if got := pop(15 * time.Millisecond); len(got) != 1 || got[0] != ps[0] {
		t.Fatalf("at 15 ms: got %v, want only the first", got)
	}
	if got := pop(20 * time.Millisecond); len(got) != 2 || got[0] != ps[1] || got[1] != ps[2] {
		t.Fatalf("at 20 ms: got %v, want the second and the third", got)
	}
	if got := pop(35 * time.Millisecond); len(got) != 0 {
		t.Fatalf("at 35 ms: %d due, want none (the fourth is stale)", len(got))
	}
	if got := pop(40 * time.Millisecond); len(got) != 1 || got[0] != ps[4] {
		t.Fatalf("at 40 ms: got %v, want the fifth", got)
	}
	if d.len() != 0 || d.head != 0 {
		t.Fatalf("emptied queue: len %d, head %d", d.len(), d.head)
	}

	// 3,000 entries of which all but every 100th go stale: compaction
	// (past 2 live + 1,024) keeps the 30 live ones in order.
	var live []*pending
	for i := range 3000 {
		p := &pending{}
		d.push(p, t0.Add(time.Duration(i)*time.Microsecond))
		if i%100 == 0 {
			live = append(live, p)
		} else {
			p.gen++
		}
	}
	d.compact(len(live))
	if d.len() != len(live) {
		t.Fatalf("after compaction %d entries, want %d", d.len(), len(live))
	}
	if got := pop(time.Second); len(got) != len(live) {
		t.Fatalf("%d due after compaction, want %d", len(got), len(live))
	} else {
		for i := range got {
			if got[i] != live[i] {
				t.Fatalf("entry %d out of order after compaction", i)
			}
		}
	}
}
