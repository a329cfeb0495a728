package flowrec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
)

// Config configures a Collector.
type Config struct {
	// Node names the node in batches.
	Node string
	// NetnsFd is the namespace felix programs (-1: the caller's).
	NetnsFd int
	// Group is the nflog group of flow marks (policy.LogConfig.FlowGroup).
	Group uint16
	// Index resolves marks' prefixes (policy.Manager.Index).
	Index *policy.RuleIndex
	// Model names ends and evaluates staged policies.
	Model Model
	// Interval is how long flows are grouped before a batch goes out
	// (0: 3 s).
	Interval time.Duration
	// Grace is how long a new connection waits for its marks (the
	// kernel flushes nflog every 100 ms; 0: 400 ms).
	Grace time.Duration
	// MaxPending, MaxOpen and MaxGroups cap the connections awaiting
	// marks (0: 16,384), the open connections remembered (0: 262,144)
	// and the groups of one interval (0: 10,000).
	MaxPending, MaxOpen, MaxGroups int
	// Source is where connections' starts and ends come from:
	// SourceProbes (the kernel's conntrack functions, bpfsrc.go),
	// SourcePoll (the conntrack table read by generations, pollsrc.go),
	// SourceEvents (ctnetlink's events), or SourceAuto ("": the
	// probes, and ctnetlink's events where the kernel refuses them,
	// logged with why).
	Source string
	// newOnce: the source names each event's entry (the probes;
	// openSource sets it): a NEW of the entry a connection already
	// has repeats it (conntrack's clash resolution) and is not
	// another connection.
	newOnce bool
	// destroyByID: a DESTROY ends the open connection only if it is of
	// that connection's entry (the probes and the poll source: the
	// poll source can report an entry's end after a newer entry on
	// the same tuple began).
	destroyByID bool
	// Sinks receive each batch on the collector's goroutine: they must
	// not block. Every sink gets the same batch, its Flows and Dropped
	// included, and may hand it to goroutines of its own: a sink treats
	// it as read-only (a sink that adds to Dropped adds to a copy).
	Sinks []func(Batch)
}

func (c *Config) defaults() {
	if c.Interval == 0 {
		c.Interval = 3 * time.Second
	}
	if c.Grace == 0 {
		c.Grace = 400 * time.Millisecond
	}
	if c.MaxPending == 0 {
		c.MaxPending = 16384
	}
	if c.MaxOpen == 0 {
		c.MaxOpen = 262144
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = DefaultMaxGroups
	}
}

// Config.Source's values.
const (
	SourceAuto   = "auto"
	SourceProbes = "probes"
	SourceEvents = "events"
	SourcePoll   = "poll"
)

// DefaultMaxGroups is the default cap on an interval's groups, so on a
// batch's flows; the aggregator refuses batches with more.
const DefaultMaxGroups = 10_000

// ErrConfig is returned for an unusable Config.
var ErrConfig = errors.New("flowrec: invalid configuration")

// mark is one flow mark: the rule that decided a packet of key.
type mark struct {
	key  flowKey
	rule policy.RuleInfo
	at   time.Time
}

// ctEvent is a conntrack NEW or DESTROY (with its counters).
type ctEvent struct {
	key     flowKey
	id      uint64 // the entry's (the probes'; 0 from ctnetlink)
	destroy bool
	counts  counts
	at      time.Time
}

// pending is a connection waiting for its marks.
type pending struct {
	key   flowKey
	first time.Time
	// gen moves on each time the connection is decided, suppressed or
	// forgotten: the due queues' entries of an earlier one are stale.
	gen   uint64
	steps []policy.RuleInfo
	ct    bool
	// ends are the DESTROYs that came while it waited: its own, and
	// those of connections on the same addresses and ports before
	// the latest (a SYN on a closed entry makes the kernel destroy
	// it and track a new connection at once: a DESTROY then a NEW).
	ends []counts
	// more counts the connections after the first on the tuple in
	// the grace (a NEW after its NEW); they share its marks and
	// class.
	more    uint64
	sawNew  bool
	id      uint64    // of the latest NEW's entry
	denied  bool      // finalized as denied: later marks are retransmits
	expires time.Time // of a denied one's suppression
}

// conn is the collector's entry of a connection: p while it awaits
// its marks (or is suppressed, denied), cls once it is open (allowed,
// until its DESTROY); never both. Kept by value in Collector.conns: an
// open connection costs its key and two pointers, no record.
type conn struct {
	p   *pending
	cls *class
	// ct: conntrack's NEW of the open connection came. One decided by
	// its marks before the NEW (the two sockets are read apart, and the
	// grace can end between them) takes that NEW as its own, not as a
	// new connection on the tuple.
	ct bool
	id uint64 // of its NEW's entry
}

// class is what connections alike share: everything of a Flow but its
// counts and times. grp is its group of the interval epoch (the
// collector's), so that a connection finds it without hashing the key.
type class struct {
	key      string
	tmpl     Flow
	refs     int
	grp      *Flow
	grpEpoch uint64
}

// Collector turns flow marks and conntrack events into batches of
// flows. One goroutine (Run's) owns its state.
type Collector struct {
	cfg  Config
	log  *logrus.Entry
	boot string
	seq  uint64

	// conns holds every connection the collector knows of, in one
	// map so that a connection costs one lookup per event: awaiting
	// its marks (or suppressed, denied), or open (allowed, until its
	// DESTROY). nPending and nOpen count each kind for the caps.
	conns           map[flowKey]conn
	nPending, nOpen int
	spare           []*pending // pending entries to reuse
	// waiting orders pending connections by the end of their grace,
	// suppressed denied ones by the end of their suppression.
	waiting, suppressed dueQueue
	classes             map[string]*class
	memo                classMemo
	groups              map[string]*Flow
	order               []string // group keys in the order they began
	epoch               uint64   // the interval's, for class.grp
	dropped             map[string]uint64
	start               time.Time

	nflogLost, ctLost atomic.Uint64
	// ctUnread counts the connections the poll source knows began but
	// never read (pollSource.unread).
	ctUnread atomic.Uint64
	// parked is set while the loop waits for events (see wakeLoop).
	parked atomic.Bool
	marksState

	nl *flowlog.Reader // the nflog reader Open made, until Run takes it
	ct ctConns
	// hooks are the kernel functions the probes attach to.
	hooks [2]string
	// source names ct's kind (SourceProbes or SourceEvents) once
	// Open chose it.
	source atomic.Value
}

// ctConns is a source of connections' starts and ends the collector
// owns: ctSock or bpfSource.
type ctConns interface {
	ctSource
	// countDrops adds what the source lost since the last call to the
	// collector's ct-overrun count.
	countDrops() bool
	close()
}

// Source says where the collector takes connections from (SourceProbes,
// SourcePoll or SourceEvents; "" before Open).
func (c *Collector) Source() string {
	s, _ := c.source.Load().(string)
	return s
}

// openSource opens the configured source of connections: with
// SourceAuto the probes, else ctnetlink's events, logging why.
func (c *Collector) openSource() (ctConns, error) {
	switch c.cfg.Source {
	case SourceEvents:
		c.source.Store(SourceEvents)
		return openConntrack(c.cfg.NetnsFd, &c.ctLost, c.log)
	case SourcePoll:
		return c.openPoll()
	case SourceProbes:
		s, err := openBPF(c.cfg.NetnsFd, c.hooks, &c.ctLost, c.log)
		if err != nil {
			return nil, err
		}
		c.source.Store(SourceProbes)
		c.cfg.newOnce, c.cfg.destroyByID = true, true
		return s, nil
	}
	s, err := openBPF(c.cfg.NetnsFd, c.hooks, &c.ctLost, c.log)
	if err == nil {
		c.source.Store(SourceProbes)
		c.cfg.newOnce, c.cfg.destroyByID = true, true
		c.log.WithField("functions", s.hooks).Info("flowrec: connections from the kernel's conntrack functions (fexit programs)")
		return s, nil
	}
	c.log.WithError(err).Warn("flowrec: the kernel refused the conntrack programs; taking ctnetlink's events, which cost new connections more (docs/flows.md; --flows-source poll is cheaper in the kernel but records fewer)")
	c.source.Store(SourceEvents)
	return openConntrack(c.cfg.NetnsFd, &c.ctLost, c.log)
}

// openPoll opens the poll source (pollsrc.go): its events come up to
// a poll period late, so connections wait that much longer for them.
func (c *Collector) openPoll() (ctConns, error) {
	s, err := openPoll(c.cfg.NetnsFd, c.cfg.MaxOpen, &c.ctLost, &c.ctUnread, c.log)
	if err != nil {
		return nil, err
	}
	c.source.Store(SourcePoll)
	// Not newOnce: the source reports each entry once itself, and the
	// kernel's entry ids repeat (a hash of the entry's address and
	// tuples: the next connection on a tuple often gets the freed
	// entry's memory, so its id), so the collector cannot tell two
	// connections on one tuple apart by id. Its DESTROY of an entry
	// that left the table unread (a sweep's) can come after a newer
	// entry's NEW on the tuple: by id it ends that entry's connection,
	// not the newer one.
	c.cfg.destroyByID = true
	c.cfg.Grace = max(c.cfg.Grace, pollGrace)
	return s, nil
}

// New checks cfg and returns a collector; Run starts it.
func New(cfg Config) (*Collector, error) {
	cfg.defaults()
	switch {
	case cfg.Group == 0:
		return nil, fmt.Errorf("%w: group must be an nflog group 1-65535 (policy.LogConfig.FlowGroup)", ErrConfig)
	case cfg.Index == nil:
		return nil, fmt.Errorf("%w: index (the policy rule index) is required", ErrConfig)
	case cfg.Model == nil:
		return nil, fmt.Errorf("%w: model is required", ErrConfig)
	case cfg.Node == "":
		return nil, fmt.Errorf("%w: node name is required", ErrConfig)
	case cfg.Source != "" && cfg.Source != SourceAuto && cfg.Source != SourceProbes && cfg.Source != SourceEvents && cfg.Source != SourcePoll:
		return nil, fmt.Errorf("%w: source %q: want %s, %s, %s or %s", ErrConfig, cfg.Source, SourceAuto, SourceProbes, SourcePoll, SourceEvents)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Collector{cfg: cfg, boot: hex.EncodeToString(b[:]), hooks: probeHooks,
		log:   logrus.WithFields(logrus.Fields{"component": "flows", "node": cfg.Node}),
		conns: map[flowKey]conn{}, classes: map[string]*class{},
		groups: map[string]*Flow{}, dropped: map[string]uint64{}}, nil
}

// Boot is this collector's boot ID (see Batch.Boot).
func (c *Collector) Boot() string { return c.boot }

// Open binds the nflog group and subscribes to conntrack events in the
// namespace; from then on nothing is missed (Run reads what queued).
// Connection accounting must be on there (EnableAccounting).
//
// A socket that cannot be opened yet (the nflog group held by another
// socket for a moment at felix's start, say) does not fail Open: it is
// logged, and Run opens it later, the nflog reader with backoff
// (meanwhile flows carry noTrace: mark-reader-down), the conntrack
// socket every ctRetry (meanwhile ct-overrun counts the failure). Open
// fails only when neither can ever run (no eventfd).
func (c *Collector) Open(ctx context.Context) error {
	ct, err := c.openSource()
	if err != nil {
		return err
	}
	nl, err := flowlog.Open(c.cfg.NetnsFd, c.cfg.Group)
	if err != nil {
		nl = nil
		c.markDown.Store(true)
		c.markFailures.Add(1)
		c.log.WithError(err).WithField("group", c.cfg.Group).Error(
			"flowrec: binding the nflog group of flow marks failed: flows get no trace (noTrace) until the reader opens it (tried again with backoff)")
	}
	c.nl, c.ct = nl, ct
	return nil
}

// Run reads flow marks and conntrack events until ctx ends, opening
// the sockets first unless Open did. The conntrack socket is read by
// Run's goroutine, which owns the collector's state; the nflog reader
// runs on a goroutine of its own (readMarks), started again when it
// fails.
func (c *Collector) Run(ctx context.Context) error {
	if c.ct == nil {
		if err := c.Open(ctx); err != nil {
			return err
		}
	}
	defer c.ct.close()
	marks := make(chan mark, 4096)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nlDone := make(chan struct{})
	go func() {
		defer close(nlDone)
		c.readMarks(ctx, c.nl, func(p flowlog.Packet) {
			ri, verdict, ok := c.cfg.Index.Resolve(p.Prefix)
			if !ok || verdict != "flow" {
				return
			}
			k, ok := keyOfPacket(p.Payload)
			if !ok {
				return
			}
			select {
			case marks <- mark{key: k, rule: ri, at: p.Time}:
				c.wakeLoop(c.ct)
			default:
				c.nflogLost.Add(1)
			}
		})
	}()
	err := c.loop(ctx, marks, c.ct)
	cancel()
	<-nlDone
	return err
}

// pendingFor is the pending entry of k (cur: its entry in conns),
// made if there is none (nil past the cap, counted). A new connection
// on the key of an open one takes the key: the open one's DESTROY was
// lost (counted as ct-overrun), or it is another conntrack entry on
// the same key (a NAT clash remapped its reply's port), whose DESTROY
// is then counted as that of a connection older than the collector.
func (c *Collector) pendingFor(k flowKey, cur conn, at time.Time) *pending {
	if cur.p != nil {
		return cur.p
	}
	if cur.cls != nil {
		c.release(cur.cls)
		c.nOpen--
		delete(c.conns, k)
	}
	if c.nPending >= c.cfg.MaxPending {
		c.dropped[DropPending]++
		return nil
	}
	var p *pending
	if n := len(c.spare); n > 0 {
		p, c.spare = c.spare[n-1], c.spare[:n-1]
	} else {
		p = &pending{}
	}
	p.key, p.first = k, at
	c.conns[k] = conn{p: p}
	c.nPending++
	c.waiting.compact(c.nPending)
	c.waiting.push(p, at.Add(c.cfg.Grace))
	return p
}

// spareMax bounds the pending entries kept for reuse. Connections are
// decided in bursts (each tick's, up to a tick's worth of new ones:
// 1,400 at 14,000 a second), so the spares must hold a burst for the
// next tick's new connections to find them.
const spareMax = 4096

// donePending forgets a pending connection (its entry in conns too,
// unless keep: the caller replaces it), keeping the record (and its
// slices) for another. Its due entries go stale.
func (c *Collector) donePending(k flowKey, p *pending, keep bool) {
	if !keep {
		delete(c.conns, k)
	}
	c.nPending--
	*p = pending{steps: p.steps[:0], ends: p.ends[:0], gen: p.gen + 1}
	if len(c.spare) < spareMax {
		c.spare = append(c.spare, p)
	}
}

func (c *Collector) onMark(m mark) {
	cur := c.conns[m.key]
	if cur.cls != nil {
		// A mark later than the grace, of a connection decided
		// already (or a packet of it still new to conntrack): it is
		// not a new connection.
		return
	}
	now := time.Now()
	p := c.pendingFor(m.key, cur, now)
	if p == nil || p.denied {
		return
	}
	// Until a reply, every packet of a connection is new to conntrack
	// and meets the policy again: keep each rule once.
	for _, s := range p.steps {
		if s.ID == m.rule.ID {
			return
		}
	}
	p.steps = append(p.steps, m.rule)
	if complete(p) {
		c.decide(m.key, p, now)
	}
}

func (c *Collector) onConntrack(e *ctEvent) {
	cur := c.conns[e.key]
	if !e.destroy {
		if cur.cls != nil && !cur.ct {
			cur.ct, cur.id = true, e.id
			c.conns[e.key] = cur
			return
		}
		if c.cfg.newOnce && (cur.cls != nil && cur.id == e.id || cur.p != nil && cur.p.sawNew && cur.p.id == e.id) {
			// The probes report the entry the connection has
			// again, for a packet that lost conntrack's race to
			// create it (its clash resolution confirms the
			// packet onto this entry): not another connection.
			return
		}
		if p := c.pendingFor(e.key, cur, e.at); p != nil && !p.denied {
			if p.sawNew {
				// A new connection on the tuple, counted
				// with this one.
				p.more++
			}
			p.sawNew, p.ct, p.id = true, true, e.id
			if complete(p) {
				c.decide(e.key, p, e.at)
			}
		}
		return
	}
	if cls := cur.cls; cls != nil && (!c.cfg.destroyByID || !cur.ct || cur.id == e.id) {
		delete(c.conns, e.key)
		c.nOpen--
		c.ended(cls, &e.counts, e.at)
		c.release(cls)
		return
	}
	if p := cur.p; p != nil && !p.denied {
		p.ends = append(p.ends, e.counts)
		p.ct = true
		return
	}
	// A connection older than the collector (or turned away by the
	// open cap; with the probes, another entry than the open one on
	// the tuple): its class is named now, its trace is unknown.
	f := policy.Flow{Src: e.key.srcAddr(), Dst: e.key.dstAddr(), Proto: e.key.proto, SrcPort: e.key.sport, DstPort: e.key.dport, ICMPType: -1, ICMPCode: -1}
	cls := c.classify(e.key, f, nil, true, false)
	if cls == nil {
		return
	}
	c.ended(cls, &e.counts, e.at)
	c.release(cls)
}

// finalize forgets the denied connections whose suppression ended and
// decides those whose marks had time to arrive (their grace ended).
func (c *Collector) finalize(now time.Time) {
	for {
		p, ok := c.suppressed.pop(now, afterDue)
		if !ok {
			break
		}
		c.donePending(p.key, p, false)
	}
	for {
		p, ok := c.waiting.pop(now, atOrAfterDue)
		if !ok {
			break
		}
		c.decide(p.key, p, now)
	}
}

func afterDue(at, now time.Time) bool     { return now.After(at) }
func atOrAfterDue(at, now time.Time) bool { return !at.After(now) }

// complete says a connection needs no more waiting: conntrack confirmed
// it and both directions' allowing marks are in (a pod to a pod of this
// node), so it is decided at once; anything else waits out the grace.
func complete(p *pending) bool {
	if !p.ct {
		return false
	}
	var eg, in bool
	for _, s := range p.steps {
		if s.Action == "Allow" {
			eg = eg || s.Direction == "egress"
			in = in || s.Direction == "ingress"
		}
	}
	return eg && in
}

// decide classifies a pending connection: denied ones stay a while so
// their retransmits are not new connections, others become open (or
// ended, when their DESTROY came already).
func (c *Collector) decide(k flowKey, p *pending, now time.Time) {
	f := policy.Flow{Src: k.srcAddr(), Dst: k.dstAddr(), Proto: k.proto, SrcPort: k.sport, DstPort: k.dport, ICMPType: -1, ICMPCode: -1}
	if k.proto == 1 || k.proto == 58 {
		f.SrcPort, f.DstPort, f.ICMPType, f.ICMPCode = 0, 0, int(k.dport), 0
	}
	cls := c.classify(k, f, p.steps, p.ct, c.marksLost(p.first))
	if cls == nil {
		c.donePending(k, p, false)
		return
	}
	g := c.group(cls, now)
	if cls.tmpl.Verdict == Deny {
		if g != nil {
			g.Denied++
		}
		c.release(cls)
		// Retransmits of a denied first packet are marked again:
		// they are the same connection attempt for 10 s.
		p.denied, p.expires, p.steps = true, now.Add(10*time.Second), p.steps[:0]
		p.gen++
		c.suppressed.compact(c.nPending)
		c.suppressed.push(p, p.expires)
		return
	}
	more, ended, sawNew, id := p.more, uint64(len(p.ends)), p.sawNew, p.id
	if g != nil {
		g.Started += 1 + more
	}
	for i := range p.ends {
		c.ended(cls, &p.ends[i], now)
	}
	if ended > more {
		// Every connection of the tuple ended.
		c.donePending(k, p, false)
		c.release(cls)
		return
	}
	if c.nOpen >= c.cfg.MaxOpen {
		c.donePending(k, p, false)
		c.dropped[DropOpen]++
		c.release(cls)
		return
	}
	// The entry turns open in place: one map write, not a delete
	// and an insert.
	c.donePending(k, p, true)
	c.conns[k] = conn{cls: cls, ct: sawNew, id: id}
	c.nOpen++
}

// ended counts an ended connection's traffic in its class's group.
func (c *Collector) ended(cls *class, n *counts, now time.Time) {
	g := c.group(cls, now)
	if g == nil {
		return
	}
	g.Ended++
	g.PacketsOut += n.pktsOut
	g.BytesOut += n.bytesOut
	g.PacketsIn += n.pktsIn
	g.BytesIn += n.bytesIn
}

// group is the interval's group of cls (nil past the cap, counted).
func (c *Collector) group(cls *class, now time.Time) *Flow {
	if cls.grp != nil && cls.grpEpoch == c.epoch {
		return cls.grp
	}
	g := c.groups[cls.key]
	if g == nil {
		if len(c.groups) >= c.cfg.MaxGroups {
			c.dropped[DropGroups]++
			return nil
		}
		g = new(Flow)
		*g = cls.tmpl
		g.Node = c.cfg.Node
		c.groups[cls.key] = g
		c.order = append(c.order, cls.key)
	}
	cls.grp, cls.grpEpoch = g, c.epoch
	return g
}

func (c *Collector) release(cls *class) {
	if cls.refs--; cls.refs <= 0 && c.classes[cls.key] == cls {
		delete(c.classes, cls.key)
	}
}

// flush hands the interval's groups to the sinks.
func (c *Collector) flush(now time.Time) {
	if n := c.nflogLost.Swap(0); n > 0 {
		c.dropped[DropNflog] += n
	}
	if c.ct != nil {
		// Drops after an ENOBUFS the loop read get none of their own.
		c.ct.countDrops()
	}
	if n := c.ctUnread.Swap(0); n > 0 {
		c.dropped[DropCtUnread] += n
	}
	if n := c.ctLost.Swap(0); n > 0 {
		c.dropped[DropCtEvents] += n
	}
	c.seq++
	b := Batch{Node: c.cfg.Node, Boot: c.boot, Seq: c.seq, Start: c.start, End: now, Flows: make([]Flow, 0, len(c.order)),
		MarkReaderFailures: c.markFailures.Swap(0), MarkReaderDown: c.markDown.Load()}
	for _, k := range c.order {
		g := c.groups[k]
		g.Start, g.End = c.start, now
		b.Flows = append(b.Flows, *g)
	}
	if len(c.dropped) > 0 {
		b.Dropped = c.dropped
		c.log.WithField("dropped", c.dropped).Warn("flowrec: records turned away by caps or kernel overruns")
	}
	c.groups, c.order, c.dropped, c.start = map[string]*Flow{}, nil, map[string]uint64{}, now
	c.epoch++
	for _, s := range c.cfg.Sinks {
		s(b)
	}
}
