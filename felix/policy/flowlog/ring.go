package flowlog

import (
	"context"
	"sync"
	"time"
)

// Record is one logged packet, resolved against the policy model.
type Record struct {
	// Seq numbers records from 1 in the order they were logged.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Verdict is "log" for a Log rule (the packet goes on to the next
	// rule) and "drop" for a logged drop.
	Verdict   string `json:"verdict"`
	Direction string `json:"direction,omitempty"`
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	Proto     string `json:"proto"`
	SrcPort   uint16 `json:"srcPort,omitempty"`
	DstPort   uint16 `json:"dstPort,omitempty"`
	ICMPType  *int   `json:"icmpType,omitempty"`
	ICMPCode  *int   `json:"icmpCode,omitempty"`
	// Fragment: a non-first fragment (no transport header, so no ports).
	Fragment bool `json:"fragment,omitempty"`
	// Iface is the host-side interface of the endpoint the rule
	// belongs to (the packet's input interface for egress, its output
	// interface for ingress).
	Iface string `json:"iface,omitempty"`
	// Endpoint is that interface's WorkloadEndpoint, Namespace and Pod
	// its pod.
	Endpoint  string `json:"endpoint,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	// Kind, Tier, Policy, Profile, Rule and RuleID name the rule (see
	// policy.RuleInfo); Rule is -1 for the drops at a tier's or the
	// profiles' end.
	Kind    string `json:"kind,omitempty"`
	Tier    string `json:"tier,omitempty"`
	Policy  string `json:"policy,omitempty"`
	Profile string `json:"profile,omitempty"`
	Rule    int    `json:"rule"`
	Action  string `json:"action,omitempty"`
	RuleID  string `json:"ruleID,omitempty"`
	// Prefix is the raw nflog prefix when it names no rule felix knows
	// (a rule removed since, or another program's log).
	Prefix string `json:"prefix,omitempty"`
}

// Ring keeps the last records; readers ask for those after a sequence
// number and may wait for more. Safe for concurrent use.
type Ring struct {
	mu      sync.Mutex
	buf     []Record
	size    int
	next    uint64 // Seq of the next record
	lost    uint64 // records the kernel dropped before we read them
	changed chan struct{}
}

// NewRing keeps at most size records.
func NewRing(size int) *Ring {
	return &Ring{size: size, next: 1, changed: make(chan struct{})}
}

// Add appends a record, numbering it, and wakes waiting readers.
func (r *Ring) Add(rec Record) {
	r.mu.Lock()
	rec.Seq = r.next
	r.next++
	if len(r.buf) == r.size {
		copy(r.buf, r.buf[1:])
		r.buf[len(r.buf)-1] = rec
	} else {
		r.buf = append(r.buf, rec)
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Lost counts a kernel overrun (records that never reached the ring).
func (r *Ring) Lost() {
	r.mu.Lock()
	r.lost++
	r.mu.Unlock()
}

// After returns the records with Seq > seq still held, the Seq to ask
// after next time, and a channel closed when more arrive.
func (r *Ring) After(seq uint64) (recs []Record, last uint64, more <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.buf {
		if rec.Seq > seq {
			recs = append(recs, rec)
		}
	}
	return recs, r.next - 1, r.changed
}

// Tail returns the Seq after which the last n records start.
func (r *Ring) Tail(n int) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.next - 1
	if uint64(n) >= last {
		return 0
	}
	return last - uint64(n)
}

// Follow hands fn the records after seq and then each new one until
// ctx ends or fn fails; without follow it returns after the first
// batch.
func (r *Ring) Follow(ctx context.Context, seq uint64, follow bool, fn func([]Record) error) error {
	for {
		recs, last, more := r.After(seq)
		if len(recs) > 0 || !follow {
			if err := fn(recs); err != nil {
				return err
			}
		}
		if !follow {
			return nil
		}
		seq = last
		select {
		case <-ctx.Done():
			return nil
		case <-more:
		}
	}
}
