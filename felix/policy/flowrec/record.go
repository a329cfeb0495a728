package flowrec

import (
	"time"

	"github.com/routed-net/routed/felix/policy"
)

// End kinds.
const (
	EndPod        = "pod"        // a workload endpoint
	EndNetworkSet = "networkset" // an address in a (Global)NetworkSet
	EndNet        = "net"        // any other address
)

// End is one end of a flow as the policy model names it.
type End struct {
	Addr string `json:"addr"`
	Kind string `json:"kind"`
	// Namespace and Name: the pod's, or the network set's (Name is its
	// key, "gns:<name>" for a GlobalNetworkSet).
	Namespace string            `json:"namespace,omitempty"`
	Name      string            `json:"name,omitempty"`
	Endpoint  string            `json:"endpoint,omitempty"`
	Node      string            `json:"node,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// LabelsTruncated: the end's labels were more than MaxLabelBytes;
	// Labels holds those that fit, in key order.
	LabelsTruncated bool `json:"labelsTruncated,omitempty"`
	// Local: a pod on the node that recorded the flow.
	Local bool `json:"local,omitempty"`
}

// appendID appends what names the end in group keys: the pod or
// network set, else the address (appended, not concatenated: a
// string of more than 32 bytes would be allocated per connection).
func (e *End) appendID(b []byte) []byte {
	switch e.Kind {
	case EndPod:
		b = append(append(b, "pod:"...), e.Namespace...)
		b = append(append(b, '/'), e.Name...)
		return append(append(b, '@'), e.Addr...)
	case EndNetworkSet:
		return append(append(b, "ns:"...), e.Name...)
	}
	return append(append(b, "net:"...), e.Addr...)
}

// Trace is what one direction's policy did with a flow's first
// packet, as the kernel marked it: the Pass rules on the way, then the
// rule that decided.
type Trace struct {
	Steps []policy.RuleInfo `json:"steps,omitempty"`
	// Verdict is "allow" or "deny"; "unknown" when the direction is
	// policed here but no mark of its decision arrived (the mark rule's
	// rate limit, an nflog overrun, a flow older than the collector).
	Verdict string `json:"verdict"`
}

// Decider is the trace's last step (zero when none).
func (t *Trace) Decider() policy.RuleInfo {
	if t == nil || len(t.Steps) == 0 {
		return policy.RuleInfo{}
	}
	return t.Steps[len(t.Steps)-1]
}

// appendKey appends the trace's part of a class key: "-" when nil,
// else its verdict and its steps' rule IDs.
func (t *Trace) appendKey(b []byte) []byte {
	if t == nil {
		return append(b, '-')
	}
	b = append(b, t.Verdict...)
	for _, s := range t.Steps {
		b = append(append(b, ','), s.ID...)
	}
	return b
}

// Verdicts of a flow.
const (
	Allow   = "allow"
	Deny    = "deny"
	Unknown = "unknown"
)

// Flow is the aggregate of the connections of one class (same ends,
// protocol, destination port, verdict, trace and staged verdicts) over
// one interval on one node.
type Flow struct {
	Node  string    `json:"node"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Src   End       `json:"src"`
	Dst   End       `json:"dst"`
	Proto string    `json:"proto"`
	// DstPort is the destination port, or for ICMP the type.
	DstPort uint16 `json:"dstPort"`
	// Verdict is the flow's: "deny" when a direction denied it,
	// "allow" when every direction policed here allowed it, "unknown"
	// when a direction's mark is missing.
	Verdict string `json:"verdict"`
	// Egress and Ingress are nil for a direction this node does not
	// police (the other end is not its pod).
	Egress  *Trace                 `json:"egress,omitempty"`
	Ingress *Trace                 `json:"ingress,omitempty"`
	Staged  []policy.StagedVerdict `json:"staged,omitempty"`
	// NoTrace says why a direction's trace is unknown when the reason
	// is known: NoTraceMarkReader. Empty otherwise (a mark lost to the
	// mark rule's rate limit or an nflog overrun, a flow older than
	// the collector).
	NoTrace string `json:"noTrace,omitempty"`
	// Started, Ended and Denied count connections that began, ended
	// (their counters are in the byte and packet fields) and were
	// denied in the interval.
	Started uint64 `json:"started"`
	Ended   uint64 `json:"ended"`
	Denied  uint64 `json:"denied"`
	// PacketsOut/BytesOut went from Src to Dst, PacketsIn/BytesIn back
	// (conntrack accounting of the connections that ended).
	PacketsOut uint64 `json:"packetsOut"`
	BytesOut   uint64 `json:"bytesOut"`
	PacketsIn  uint64 `json:"packetsIn"`
	BytesIn    uint64 `json:"bytesIn"`
}

// Batch is one interval of one node's flows.
type Batch struct {
	Node string `json:"node"`
	// Boot is random per collector start and Seq numbers its batches
	// from 1: a reader that sees Seq jump or Boot change knows what
	// it missed is a gap.
	Boot  string    `json:"boot"`
	Seq   uint64    `json:"seq"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Flows []Flow    `json:"flows"`
	// Part numbers the pieces of a batch the sender split to fit the
	// aggregator's limits (0, 1, ...); only piece 0 carries Dropped.
	Part int `json:"part,omitempty"`
	// Dropped counts connections or marks the caps or the kernel
	// turned away in the interval (they are in no flow), by reason.
	Dropped map[string]uint64 `json:"dropped,omitempty"`
	// MarkReaderFailures counts failures of the node's nflog reader
	// (the source of the traces) in the interval; MarkReaderDown says
	// it was not running at the batch's end. Flows decided meanwhile
	// carry NoTrace. The node's sinks (its metrics) read them; they
	// are not sent (the aggregator refuses fields it does not know).
	MarkReaderFailures uint64 `json:"-"`
	MarkReaderDown     bool   `json:"-"`
}

// NoTraceMarkReader is Flow.NoTrace when the node's nflog reader was
// down while the flow's connections waited for their marks.
const NoTraceMarkReader = "mark-reader-down"

// ApproxBytes estimates the batch's JSON size without encoding it (the
// queues bound their bytes with it): a fixed cost per flow, trace step
// and staged verdict, plus the ends' labels.
func (b *Batch) ApproxBytes() int {
	n := 256
	for i := range b.Flows {
		f := &b.Flows[i]
		n += 512 + 256*len(f.Staged)
		for _, e := range []*End{&f.Src, &f.Dst} {
			for k, v := range e.Labels {
				n += len(k) + len(v) + 6
			}
		}
		for _, t := range []*Trace{f.Egress, f.Ingress} {
			if t != nil {
				n += 256 * len(t.Steps)
			}
		}
	}
	return n
}

// DroppedTotal sums Dropped.
func (b *Batch) DroppedTotal() uint64 {
	var n uint64
	for _, v := range b.Dropped {
		n += v
	}
	return n
}

// Drop reasons.
const (
	DropPending  = "pending-cap"   // too many connections awaiting their marks
	DropOpen     = "open-cap"      // too many open connections to remember their class
	DropGroups   = "group-cap"     // too many groups in one interval
	DropNflog    = "nflog-overrun" // the kernel dropped marks (socket full)
	DropCtEvents = "ct-overrun"    // the kernel dropped conntrack events
	DropCtUnread = "ct-unread"     // the poll source counted connections it never read (their entries went first)
	// DropFileQueue counts batches the flow log file's queue turned
	// away before this one (only in the file's lines).
	DropFileQueue = "file-queue-batches"
)

// DropReasons are the reasons a node's batch may carry in Dropped; the
// aggregator refuses a batch with any other.
var DropReasons = []string{DropPending, DropOpen, DropGroups, DropNflog, DropCtEvents, DropCtUnread}
