// Package flowagg is the cluster's flow aggregator: nodes send it their
// batches of flows (felix/policy/flowrec) over mutual TLS, it keeps a
// bounded window of them in memory, notes the gaps (a node's batches
// missing, a node's routed restarted, records a node's caps turned
// away, its own restart), and serves them to readers as JSON lines,
// following if asked, and as a web page.
package flowagg

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

// Entry is one item of the window: a flow, or a gap in what the window
// holds.
type Entry struct {
	// Seq numbers entries from 1 in the order the aggregator received
	// them; a follower asks for those after the last it saw.
	Seq      uint64        `json:"seq"`
	Received time.Time     `json:"received"`
	Flow     *flowrec.Flow `json:"flow,omitempty"`
	Gap      *Gap          `json:"gap,omitempty"`
}

// Gap says that flows of a node (or, for Node "*", of every node) in
// [From, To] may be missing from the window, and why.
type Gap struct {
	Node   string    `json:"node"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Reason string    `json:"reason"`
	// Dropped counts what the node's caps or kernel turned away, by
	// reason (flowrec.Batch.Dropped), when that is the gap.
	Dropped map[string]uint64 `json:"dropped,omitempty"`
	// Evicted counts the entries a reader missed that left the window
	// (its cap or MaxAge) before it asked, when that is the gap; To is
	// then when the first entry the window still holds arrived.
	Evicted uint64 `json:"evicted,omitempty"`
}

// Gap reasons.
const (
	GapRestarted  = "node-restarted"     // a new boot ID: the last interval before it was lost
	GapMissing    = "batches-missing"    // sequence numbers skipped (the node's send queue overflowed)
	GapDropped    = "records-dropped"    // the node counted records its caps or kernel turned away
	GapAggregator = "aggregator-started" // nothing before this aggregator started
	GapEvicted    = "window-evicted"     // entries left the window (its cap or age) before the reader asked
)

// nodeState is what the window remembers of a node to find its gaps.
type nodeState struct {
	boot    string
	seq     uint64
	part    int // the last piece taken of batch seq (Batch.Part)
	lastEnd time.Time
	seen    time.Time // when its last batch arrived
}

// Memory bounds beside the entry count: the count alone bounds nothing
// when a sender makes each record large (labels, traces) or invents
// node names.
const (
	// MaxBytes bounds the heap the window's entries hold, as heapSize
	// estimates it (heapsize.go; the window held 0.82x to 0.95x of it
	// in TestWindowHeapWithinBudget), not their JSON size: a decoded
	// record holds 1.4 to 7 times its JSON.
	MaxBytes = 256 << 20
	// MaxRecordBytes bounds one record's JSON, the line a reader is
	// served: a larger one is counted as dropped ("record-too-large"),
	// not kept.
	MaxRecordBytes = 64 << 10
	// MaxNodes bounds the nodes the window tracks (Kubernetes' limit is
	// 5,000); a batch of a node beyond it is refused.
	MaxNodes = 20_000
)

// Window keeps the last entries (at most Max, none older than MaxAge,
// at most MaxBytes of heap). Safe for concurrent use.
type Window struct {
	max    int
	maxAge time.Duration
	// The memory bounds (MaxBytes, MaxRecordBytes, MaxNodes).
	maxBytes, maxRecord, maxNodes int

	mu sync.Mutex
	// buf[head:] are the entries, oldest first (their Seq ascending);
	// sizes[head:] their heap sizes (heapSize). Eviction advances head
	// and compacts only when head passes half of buf, so a record
	// costs O(1) amortized however full the window is.
	buf     []Entry
	sizes   []int
	head    int
	bytes   int // sum of sizes
	next    uint64
	nodes   map[string]*nodeState
	evicted uint64 // entries pushed out by the cap
	changed chan struct{}
}

// NewWindow keeps at most max entries of at most maxAge, and starts
// with a gap saying nothing before now is held.
func NewWindow(max int, maxAge time.Duration) *Window {
	w := &Window{max: max, maxAge: maxAge, maxBytes: MaxBytes, maxRecord: MaxRecordBytes, maxNodes: MaxNodes, next: 1, nodes: map[string]*nodeState{}, changed: make(chan struct{})}
	now := time.Now()
	w.addLocked(Entry{Received: now, Gap: &Gap{Node: "*", To: now, Reason: GapAggregator}})
	return w
}

// ErrTooManyNodes refuses a batch of a node the window cannot track.
var ErrTooManyNodes = errors.New("flowagg: the aggregator tracks MaxNodes nodes already")

// Add takes one node's batch, noting the gaps it shows.
func (w *Window) Add(b flowrec.Batch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	st := w.nodes[b.Node]
	if st == nil && len(w.nodes) >= w.maxNodes {
		w.forgetNodesLocked(now)
	}
	if st == nil && len(w.nodes) >= w.maxNodes {
		return fmt.Errorf("%w (%d): node %q", ErrTooManyNodes, w.maxNodes, b.Node)
	}
	switch {
	case st == nil:
		if b.Seq > 1 {
			// A node known to the previous aggregator (or whose first
			// batches were lost): its earlier batches are not here.
			w.addLocked(Entry{Received: now, Gap: &Gap{Node: b.Node, To: b.Start, Reason: GapMissing}})
		}
		st = &nodeState{}
		w.nodes[b.Node] = st
	case st.boot != b.Boot:
		w.addLocked(Entry{Received: now, Gap: &Gap{Node: b.Node, From: st.lastEnd, To: b.Start, Reason: GapRestarted}})
	case b.Seq < st.seq || b.Seq == st.seq && b.Part <= st.part:
		return nil // a batch (or piece) resent after its acknowledgement was lost
	case b.Seq == st.seq && b.Part != st.part+1,
		b.Seq == st.seq+1 && b.Part != 0,
		b.Seq > st.seq+1:
		w.addLocked(Entry{Received: now, Gap: &Gap{Node: b.Node, From: st.lastEnd, To: b.Start, Reason: GapMissing}})
	}
	st.boot, st.seq, st.part, st.lastEnd, st.seen = b.Boot, b.Seq, b.Part, b.End, now
	var kept []Entry
	var sizes []int
	tooLarge := uint64(0)
	for i := range b.Flows {
		f := b.Flows[i]
		e := Entry{Received: now, Flow: &f}
		if jsonSize(&e) > w.maxRecord {
			tooLarge++
			continue
		}
		kept, sizes = append(kept, e), append(sizes, heapSize(&e))
	}
	dropped := b.Dropped
	if tooLarge > 0 {
		dropped = maps.Clone(dropped)
		if dropped == nil {
			dropped = map[string]uint64{}
		}
		dropped["record-too-large"] += tooLarge
	}
	if len(dropped) > 0 {
		w.addLocked(Entry{Received: now, Gap: &Gap{Node: b.Node, From: b.Start, To: b.End, Reason: GapDropped, Dropped: dropped}})
	}
	for i := range kept {
		w.addSizedLocked(kept[i], sizes[i])
	}
	w.expireLocked(now)
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// forgetNodesLocked forgets the nodes not heard from for longer than
// the window's MaxAge: none of their entries is left, and a node name
// sent once must not hold a place forever. A forgotten node that comes
// back starts with a batches-missing gap.
func (w *Window) forgetNodesLocked(now time.Time) {
	for name, st := range w.nodes {
		if now.Sub(st.seen) > w.maxAge {
			delete(w.nodes, name)
		}
	}
}

// jsonSize is an entry's JSON size, the line a reader is served.
func jsonSize(e *Entry) int {
	b, err := json.Marshal(e)
	if err != nil {
		return MaxRecordBytes + 1
	}
	return len(b)
}

func (w *Window) addLocked(e Entry) { w.addSizedLocked(e, heapSize(&e)) }

func (w *Window) addSizedLocked(e Entry, size int) {
	e.Seq = w.next
	w.next++
	n := 0
	for w.head+n < len(w.buf) && (len(w.buf)-w.head-n >= w.max || w.bytes+size > w.maxBytes) {
		w.bytes -= w.sizes[w.head+n]
		n++
	}
	if n > 0 {
		w.evicted += uint64(n)
		w.dropLocked(n)
	}
	w.buf = append(w.buf, e)
	w.sizes = append(w.sizes, size)
	w.bytes += size
}

// dropLocked removes the n oldest entries (their sizes already taken
// off w.bytes).
func (w *Window) dropLocked(n int) {
	clear(w.buf[w.head : w.head+n]) // let the flows be collected
	w.head += n
	if w.head >= len(w.buf)/2 && w.head >= 1024 || w.head == len(w.buf) {
		live := copy(w.buf, w.buf[w.head:])
		clear(w.buf[live:])
		w.buf = w.buf[:live]
		w.sizes = w.sizes[:copy(w.sizes, w.sizes[w.head:])]
		w.head = 0
	}
}

func (w *Window) expireLocked(now time.Time) {
	i := w.head
	for i < len(w.buf) && now.Sub(w.buf[i].Received) > w.maxAge {
		w.bytes -= w.sizes[i]
		i++
	}
	if i > w.head {
		w.dropLocked(i - w.head)
	}
}

// After returns the entries with Seq > seq that keep says to keep, the
// Seq to ask after next, and a channel closed when more arrive. When
// entries after seq left the window, a gap says so first, with how
// many, for a reader starting afresh (seq 0) too.
func (w *Window) After(seq uint64, keep func(*Entry) bool) (out []Entry, last uint64, more <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	live := w.buf[w.head:]
	now := time.Now()
	first, start := w.next, now // the first entry held, and when it came
	if len(live) > 0 {
		first, start = live[0].Seq, live[0].Received
	}
	if first > seq+1 {
		out = append(out, Entry{Received: now, Gap: &Gap{Node: "*", To: start, Reason: GapEvicted, Evicted: first - seq - 1}})
	}
	// Seq ascends: a follower's start is found by binary search.
	from, _ := slices.BinarySearchFunc(live, seq+1, func(e Entry, s uint64) int { return cmp.Compare(e.Seq, s) })
	for i := from; i < len(live); i++ {
		if keep(&live[i]) {
			out = append(out, live[i])
		}
	}
	return out, w.next - 1, w.changed
}

// Stats reports the window's size and what its caps pushed out.
func (w *Window) Stats() (entries int, evicted uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf) - w.head, w.evicted
}

// Bytes is the heap the window's entries hold, as heapSize estimates
// it.
func (w *Window) Bytes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}
