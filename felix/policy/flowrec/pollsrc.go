package flowrec

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// The poll source's pace.
const (
	// pollEvery is how often the generations move on and the one just
	// closed is read: a connection's start reaches the collector
	// within about this long (pollGrace waits for it).
	pollEvery = time.Second
	// pollSettle lets packets that took the closed generation before
	// the rules moved on reach conntrack's confirmation (microseconds)
	// before it is read.
	pollSettle = 20 * time.Millisecond
	// sweepEvery is how often, at least, the open entries are read
	// whole, to find those that left the table without a TCP end (UDP
	// and ICMP timeouts, flushes, TCP entries that expired open).
	sweepEvery = 5 * time.Second
	// sweepRate bounds a sweep's pace: with many open entries the
	// sweeps space out so that about this many are read a second.
	sweepRate = 20000
	// pollGrace is how long a connection waits for its start from
	// this source: a poll period, the settle time and the marks' own
	// grace.
	pollGrace = pollEvery + pollSettle + 400*time.Millisecond
)

// pollSource is the collector's conntrack source that reads the table
// instead of subscribing to its events (no event cache, no message
// built in a connection's context: docs/flows.md). Rules in the table
// inet routed-flows (genrules.go) write the current generation into
// the conntrack mark of a new entry and of one that sees its first
// TCP FIN or RST. Every pollEvery the generation moves on, and the
// kernel, filtering by mark, hands over only the entries of the one
// just closed: each connection is read about twice, at its start and
// at its end, however big the table is. (Each dump walks the kernel's
// whole conntrack hash, every namespace's, under its bucket locks:
// about 14 ms at 262,144 buckets, so the source dumps once a poll and
// once a sweep.) What the source knows of each entry it reported (tracked)
// makes its events: a NEW for an entry first read, a DESTROY for one
// read finished (TCP TIME_WAIT or CLOSE), closing ones read again until
// they finish or go, and open ones that a sweep no longer finds
// (their counters as last read).
//
// It implements ctSource: read does the polls that fell due and hands
// over their events; wait sleeps until the next one (or a poke).
type pollSource struct {
	log  *logrus.Entry
	lost *atomic.Uint64
	// max bounds the entries tracked; past it entries are counted in
	// lost, not reported.
	max int

	netnsFd int
	nft     *nftables.Conn
	ct      *ctTable
	// up: the table was read and the rules written (start); until
	// then start is tried again at retryAt.
	up      bool
	retryAt time.Time

	// n is the poll number whose generations the rules write; closed
	// the one read next, at readAt (zero: none waiting).
	n, closed        uint64
	rotateAt, readAt time.Time
	sweepAt          time.Time
	sweeps           uint64
	// skipGen is the generation the first sweep leaves for reading as
	// new (a previous routed's last, which it did not read).
	skipGen uint32
	// missing are the tracked open entries the last sweep did not
	// find: ended in the generation then current (read at the next
	// poll, missingAt) or gone.
	missing   []trackKey
	missingAt uint64

	// unread counts the connections that got a generation and were
	// never read: the kernel deleted their entries before the poll
	// (a new connection on the tuple of one in TIME_WAIT ends it at
	// once, say). counted is the generation counters' sum up to the
	// generation read before the last, reported the NEWs handed over,
	// owed what of the difference unread holds already.
	unread                  *atomic.Uint64
	counted, reported, owed uint64

	tracked map[trackKey]*tracked
	closing []trackKey
	evs     []ctEvent
	warnAt  time.Time

	until time.Time
	pfd   []unix.PollFd
	*waker
}

type trackKey struct {
	id  uint64
	key flowKey
}

// tracked is what the source keeps of an entry it reported.
type tracked struct {
	counts counts
	sweep  uint64 // the last sweep that found it open
	// closing: a FIN or RST was seen, not the end yet; orig is its
	// original tuple attribute to read it again, fam its family.
	closing bool
	since   uint64 // the poll that found it closing
	fam     uint8
	orig    []byte
}

// monoPoll is the poll number of now: CLOCK_MONOTONIC's seconds, the
// same for a restarted routed (so its generations follow on from the
// previous one's) and never stepped back.
func monoPoll() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return uint64(time.Now().Unix())
	}
	return uint64(ts.Sec) / uint64(pollEvery/time.Second)
}

// openPoll opens the poll source in the namespace (-1: the caller's).
// A table that cannot be read or rules that cannot be written yet are
// not an error: the source starts failed (counted and logged) and
// tries again every ctRetry, as the event socket does. Only the
// eventfd's failure is.
func openPoll(netnsFd int, max int, lost, unread *atomic.Uint64, log *logrus.Entry) (*pollSource, error) {
	w, err := newWaker()
	if err != nil {
		return nil, err
	}
	s := &pollSource{log: log, lost: lost, unread: unread, max: max, netnsFd: netnsFd, waker: w, tracked: map[trackKey]*tracked{}}
	if err := s.start(); err != nil {
		s.fail("opening the conntrack table", err)
		s.retryAt = time.Now().Add(ctRetry)
	}
	return s, nil
}

// start reads the table once (what is open or closing now is not
// reported as new: it began before this source) and writes the
// generation rules.
func (s *pollSource) start() (err error) {
	// One socket for the source's life: the rules are written every
	// second.
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if s.netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(s.netnsFd))
	}
	nft, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("flowrec: nftables: %w", err)
	}
	ct, err := openCtTable(s.netnsFd)
	if err != nil {
		_ = nft.CloseLasting()
		return err
	}
	defer func() {
		if err != nil {
			_ = nft.CloseLasting()
			s.nft = nil
			ct.close()
			s.ct = nil
			clear(s.tracked)
			s.closing = s.closing[:0]
		}
	}()
	s.nft, s.ct = nft, ct
	s.n = monoPoll()
	// The rules a previous routed left (they stay when it stops, so
	// that connections keep their generations meanwhile): the
	// generations it had not read yet are read after the first sweep.
	oldGen, hadRules := readGenRules(nft)
	s.skipGen = oldGen
	// A previous routed's counts are its own.
	_, _ = takeNewCount(nft, 0)
	_, _ = takeNewCount(nft, 1)
	defer func() { s.skipGen = 0 }()
	if err := s.sweep(true); err != nil {
		return err
	}
	if err := genRules(nft, s.n); err != nil {
		return err
	}
	s.checkTimeouts()
	now := time.Now()
	if hadRules {
		time.Sleep(pollSettle)
		s.readGen(oldGen, s.n, now, false)
	}
	s.rotateAt, s.sweepAt, s.up = now.Add(pollEvery), now.Add(sweepEvery), true
	return nil
}

// read does what fell due (moving the generations on, reading the one
// closed, a sweep) and hands over the events that made.
func (s *pollSource) read(fn func(*ctEvent)) (n int, full bool) {
	now := time.Now()
	if !s.up {
		if now.Before(s.retryAt) {
			return 0, false
		}
		if err := s.start(); err != nil {
			s.fail("opening the conntrack table", err)
			s.retryAt = now.Add(ctRetry)
			return 0, false
		}
		s.log.Info("flowrec: conntrack table: read again")
	}
	if s.readAt.IsZero() && !now.Before(s.rotateAt) {
		s.rotate(now)
	}
	if !s.readAt.IsZero() && !now.Before(s.readAt) {
		s.readAt = time.Time{}
		s.readClosed(now)
		if !now.Before(s.sweepAt) {
			if err := s.sweep(false); err != nil {
				s.fail("sweeping the conntrack table", err)
			}
			every := max(sweepEvery, time.Duration(len(s.tracked)/sweepRate)*time.Second)
			s.sweepAt = now.Add(every)
		}
	}
	for i := range s.evs {
		fn(&s.evs[i])
	}
	n = len(s.evs)
	s.evs = s.evs[:0]
	return n, false
}

// rotate moves the generations on: the rules take the next poll's,
// and the closed one is read once packets that took it are confirmed.
func (s *pollSource) rotate(now time.Time) {
	// One at a time, even after a stall: the counters go by the
	// generation's parity, so consecutive ones must alternate.
	next := s.n + 1
	if err := genRules(s.nft, next); err != nil {
		// Connections keep the generation they get until the next
		// try: none is missed, they are read a poll later.
		s.fail("moving the generations on", err)
		s.rotateAt = now.Add(pollEvery)
		return
	}
	s.closed, s.n = s.n, next
	s.readAt = now.Add(pollSettle)
	s.rotateAt = s.rotateAt.Add(pollEvery)
	if s.rotateAt.Before(now) {
		s.rotateAt = now.Add(pollEvery)
	}
}

// readClosed reads the entries whose last event was in the closed
// generation, and the closing ones read before.
func (s *pollSource) readClosed(now time.Time) {
	s.readGen(gen(s.closed), s.closed, now, true)
}

// readGen reads the entries of generation g (poll number p's): those
// that began in it (NEW) and those that began to close in it (NEW if
// not reported, DESTROY if finished, else read again later); then the
// closing ones found before p, and the open ones the last sweep missed
// if it ran in p. count: take p's count of new entries (not for a
// previous routed's generation, whose counter is the current one's).
func (s *pollSource) readGen(g uint32, p uint64, now time.Time, count bool) {
	err := s.ct.dump(g<<markGenShift, markGenMask, func(e *ctEntry) {
		k := trackKey{e.id, e.key}
		t := s.tracked[k]
		if e.mark&markOpen != 0 {
			if t != nil {
				t.counts = e.counts // read again as the generations wrapped
			} else if s.track(k, e) != nil {
				s.emit(e, false, now)
			}
			return
		}
		if e.mark&markEnded == 0 {
			return
		}
		if t == nil {
			// Begun and closing within one generation.
			if t = s.track(k, e); t == nil {
				return
			}
			s.emit(e, false, now)
		}
		if e.finished() {
			s.emit(e, true, now)
			delete(s.tracked, k)
			return
		}
		t.counts = e.counts
		s.markClosing(k, t, e, p)
	})
	if err != nil {
		s.fail("reading the conntrack table's generation", err)
	}
	if count {
		s.countUnread(p)
	}
	s.readClosing(p, now)
	if s.missing != nil && s.missingAt == p {
		for _, k := range s.missing {
			if t := s.tracked[k]; t != nil && !t.closing {
				s.emit(&ctEntry{ctEvent: ctEvent{key: k.key, id: k.id, counts: t.counts}}, true, now)
				delete(s.tracked, k)
			}
		}
		s.missing = nil
	}
}

// countUnread adds to unread the connections counted up to the
// generation before p that no read reported: a connection is given
// until the poll after its generation's to be reported (its
// generation moved on while its own was read). Then it takes in p's
// count.
func (s *pollSource) countUnread(p uint64) {
	n, err := takeNewCount(s.nft, p)
	if err != nil {
		s.fail("reading the generation's count", err)
		return
	}
	if s.counted > s.reported && s.counted-s.reported > s.owed {
		s.unread.Add(s.counted - s.reported - s.owed)
		s.owed = s.counted - s.reported
	}
	s.counted += n
}

// markClosing notes that a tracked entry began to close in poll p: it
// is read again each poll until it finishes or goes.
func (s *pollSource) markClosing(k trackKey, t *tracked, e *ctEntry, p uint64) {
	if t.closing {
		return
	}
	t.closing, t.since, t.orig = true, p, append([]byte(nil), e.orig...)
	t.fam = unix.AF_INET
	if e.key.v6 {
		t.fam = unix.AF_INET6
	}
	s.closing = append(s.closing, k)
}

// readClosing reads again each entry found closing before poll p:
// finished, or gone (or another entry on its tuple), it ended.
func (s *pollSource) readClosing(p uint64, now time.Time) {
	keep := s.closing[:0]
	for _, k := range s.closing {
		t := s.tracked[k]
		if t == nil || !t.closing {
			continue
		}
		if t.since == p {
			keep = append(keep, k)
			continue
		}
		var cur ctEntry
		found, err := s.ct.get(t.fam, t.orig, func(e *ctEntry) { cur = *e; cur.orig = nil })
		if err != nil {
			s.fail("reading a closing conntrack entry", err)
			keep = append(keep, k)
			continue
		}
		switch {
		case !found || cur.id != k.id:
			s.emit(&ctEntry{ctEvent: ctEvent{key: k.key, id: k.id, counts: t.counts}}, true, now)
			delete(s.tracked, k)
		case cur.finished():
			s.emit(&cur, true, now)
			delete(s.tracked, k)
		default:
			t.counts = cur.counts
			keep = append(keep, k)
		}
	}
	clear(s.closing[len(keep):])
	s.closing = keep
}

// sweep reads the open entries whole. An open entry not tracked, of a
// generation already read, was missed (or, at the first sweep, began
// before this source: tracked, not reported); a tracked open one it
// does not find ended in the current generation (read at the next
// poll) or left the table (ended then with the counters last read).
// The first sweep reads every entry of routed's, closing ones too.
func (s *pollSource) sweep(first bool) error {
	s.sweeps++
	now := time.Now()
	cur := gen(s.n)
	var mark, mask uint32 = markOpen, markOpen
	if first {
		mark, mask = 0, 0
	}
	err := s.ct.dump(mark, mask, func(e *ctEntry) {
		g := (e.mark & markGenMask) >> markGenShift
		if g == 0 {
			return // not marked: before the rules
		}
		k := trackKey{e.id, e.key}
		if t := s.tracked[k]; t != nil {
			t.counts, t.sweep = e.counts, s.sweeps
			return
		}
		switch {
		case first && g == s.skipGen:
			return // a previous routed's last generation: read after
		case first && e.mark&markEnded != 0:
			if !e.finished() {
				if t := s.track(k, e); t != nil {
					s.markClosing(k, t, e, s.n)
				}
			}
			return
		case !first && g == cur:
			return // the current generation's: read when it closes
		}
		if t := s.track(k, e); t != nil && !first {
			s.emit(e, false, now)
		}
	})
	if err != nil {
		return err
	}
	s.missing = s.missing[:0]
	for k, t := range s.tracked {
		if !t.closing && t.sweep != s.sweeps {
			s.missing = append(s.missing, k)
		}
	}
	s.missingAt = s.n
	return nil
}

// track starts tracking an entry (nil past the cap, counted as lost).
func (s *pollSource) track(k trackKey, e *ctEntry) *tracked {
	if len(s.tracked) >= s.max {
		s.lost.Add(1)
		return nil
	}
	t := &tracked{counts: e.counts, sweep: s.sweeps}
	s.tracked[k] = t
	return t
}

// emit queues a NEW or DESTROY event of the entry.
func (s *pollSource) emit(e *ctEntry, destroy bool, at time.Time) {
	ev := e.ctEvent
	ev.destroy, ev.at = destroy, at
	if !destroy {
		ev.counts = counts{}
		s.reported++
	}
	s.evs = append(s.evs, ev)
}

// fail counts a failed step (what it missed is not known) and logs it,
// at most every 10 s.
func (s *pollSource) fail(what string, err error) {
	s.lost.Add(1)
	if now := time.Now(); now.After(s.warnAt) {
		s.warnAt = now.Add(10 * time.Second)
		s.log.WithError(err).Warn("flowrec: " + what + " failed (counted as ct-overrun)")
	}
}

// countDrops: the source's losses are counted as they happen.
func (s *pollSource) countDrops() bool { return true }

func (s *pollSource) arm(until time.Time) { s.until = until }

// wait sleeps until the armed time, the next step or a poke.
func (s *pollSource) wait(<-chan mark) (mark, bool) {
	until := s.rotateAt
	switch {
	case !s.up:
		until = s.retryAt
	case !s.readAt.IsZero():
		until = s.readAt
	}
	if s.until.Before(until) {
		until = s.until
	}
	var err error
	if s.pfd, err = s.poll(s.pfd, nil, until); err != nil && !errors.Is(err, unix.EINTR) {
		s.log.WithError(err).Warn("flowrec: waiting for the next conntrack poll")
		time.Sleep(ctBatchWait)
	}
	return mark{}, false
}

func (s *pollSource) settle() {}

// close closes the sockets. The generation rules stay, as felix leaves
// its dataplane when it stops: connections begun meanwhile keep getting
// the last generation, which a restarted source reads first
// (openPoll). RemoveGenRules takes them away (flows turned off,
// uninstall).
func (s *pollSource) close() {
	if s.nft != nil {
		_ = s.nft.CloseLasting()
		s.nft = nil
	}
	if s.ct != nil {
		s.ct.close()
		s.ct = nil
	}
	s.waker.close()
}

// RemoveGenRules deletes the poll source's table in the namespace (-1:
// the caller's), if it is there: removed says it was.
func RemoveGenRules(netnsFd int) (removed bool, err error) {
	var opts []nftables.ConnOption
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	nft, err := nftables.New(opts...)
	if err != nil {
		return false, fmt.Errorf("flowrec: nftables: %w", err)
	}
	if _, ok := readGenRules(nft); !ok {
		tables, err := nft.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return false, fmt.Errorf("flowrec: listing nftables tables: %w", err)
		}
		found := false
		for _, t := range tables {
			found = found || t.Name == GenTable
		}
		if !found {
			return false, nil
		}
	}
	return true, deleteGenRules(nft)
}

// closeTimeouts are the conntrack timeouts of a closed TCP connection:
// its entry must stay past a poll for its end to be read (the kernel's
// dump skips an entry whose timeout passed and deletes it).
var closeTimeouts = []string{"nf_conntrack_tcp_timeout_time_wait", "nf_conntrack_tcp_timeout_close"}

// minCloseTimeout is the least closing timeout that leaves an entry
// for the poll after the one it ended in (seconds).
const minCloseTimeout = 3

// checkTimeouts warns when the namespace's conntrack keeps closed TCP
// connections too briefly for their ends to be read.
func (s *pollSource) checkTimeouts() {
	var short []string
	err := inNetns(s.netnsFd, func() error {
		for _, name := range closeTimeouts {
			b, err := os.ReadFile("/proc/sys/net/netfilter/" + name)
			if err != nil {
				return err
			}
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v < minCloseTimeout {
				short = append(short, fmt.Sprintf("net.netfilter.%s = %d", name, v))
			}
		}
		return nil
	})
	if err != nil {
		s.log.WithError(err).Debug("flowrec: reading conntrack's closing timeouts")
		return
	}
	if len(short) > 0 {
		s.log.WithField("sysctls", strings.Join(short, ", ")).Warnf(
			"flowrec: closed TCP connections leave conntrack in under %d s: the poll source may miss their ends (raise them, or --flows-source events)", minCloseTimeout)
	}
}
