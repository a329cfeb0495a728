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
// inet routed-flows (genrules.go) write generations into the
// conntrack mark: the start generation on a new entry, the end
// generation on its first TCP FIN or RST. Every pollEvery the
// generations move on, and the kernel, filtering by mark, hands over
// only the entries of the generations just closed: each connection is
// read about twice, at its start and at its end, however big the
// table is. What the source knows of each entry it reported (tracked)
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
	// skipStart is the start generation the first sweep leaves for
	// reading as new (a previous routed's last, which it did not read).
	skipStart uint32

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
func openPoll(netnsFd int, max int, lost *atomic.Uint64, log *logrus.Entry) (*pollSource, error) {
	w, err := newWaker()
	if err != nil {
		return nil, err
	}
	s := &pollSource{log: log, lost: lost, max: max, netnsFd: netnsFd, waker: w, tracked: map[trackKey]*tracked{}}
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
	var opts []nftables.ConnOption
	if s.netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(s.netnsFd))
	}
	nft, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("flowrec: nftables: %w", err)
	}
	ct, err := openCtTable(s.netnsFd)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
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
	oldStart, oldEnd, hadRules := readGenRules(nft)
	s.skipStart = oldStart
	defer func() { s.skipStart = 0 }()
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
		s.readGens(oldStart, oldEnd, s.n, now)
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
	next := max(s.n+1, monoPoll())
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

// readClosed reads the entries that began and those that began closing
// in the closed generation, and the closing ones read before.
func (s *pollSource) readClosed(now time.Time) {
	s.readGens(startGen(s.closed), endGen(s.closed), s.closed, now)
}

// readGens reads the entries of start generation sg and end generation
// eg (poll number p's) and the closing ones found before p.
func (s *pollSource) readGens(sg, eg uint32, p uint64, now time.Time) {
	err := s.ct.dump(markOpen|sg<<markStartShift, markOpen|markStartMask, func(e *ctEntry) {
		k := trackKey{e.id, e.key}
		if t := s.tracked[k]; t != nil {
			t.counts = e.counts
			return
		}
		if s.track(k, e) != nil {
			s.emit(e, false, now)
		}
	})
	if err != nil {
		s.fail("reading the conntrack table's new entries", err)
	}
	err = s.ct.dump(eg<<markEndShift, markEndMask, func(e *ctEntry) {
		k := trackKey{e.id, e.key}
		t := s.tracked[k]
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
		if !t.closing {
			t.closing, t.since, t.orig = true, p, append([]byte(nil), e.orig...)
			t.fam = unix.AF_INET
			if e.key.v6 {
				t.fam = unix.AF_INET6
			}
			s.closing = append(s.closing, k)
		}
	})
	if err != nil {
		s.fail("reading the conntrack table's ended entries", err)
	}
	s.readClosing(p, now)
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
// generation already read, was missed (or began before this source:
// first, reported as nothing); a tracked open one it does not find,
// nor among those that began closing in the current generation, left
// the table: it ended with the counters last read.
func (s *pollSource) sweep(first bool) error {
	s.sweeps++
	now := time.Now()
	cur := startGen(s.n)
	err := s.ct.dump(markOpen, markOpen, func(e *ctEntry) {
		k := trackKey{e.id, e.key}
		if t := s.tracked[k]; t != nil {
			t.counts, t.sweep = e.counts, s.sweeps
			return
		}
		switch g := (e.mark & markStartMask) >> markStartShift; {
		case !first && g == cur:
			return // the current generation's: read when it closes
		case first && g == s.skipStart:
			return // a previous routed's last: read as new after
		}
		if t := s.track(k, e); t != nil && !first {
			s.emit(e, false, now)
		}
	})
	if err != nil {
		return err
	}
	if first {
		// Closing entries of before: not reported as new; read
		// again until they end, as others are.
		return s.ct.dump(0, 0, func(e *ctEntry) {
			if e.mark&markEndMask == 0 || e.finished() {
				return
			}
			k := trackKey{e.id, e.key}
			if t := s.track(k, e); t != nil {
				t.closing, t.since, t.orig = true, s.n, append([]byte(nil), e.orig...)
				t.fam = unix.AF_INET
				if e.key.v6 {
					t.fam = unix.AF_INET6
				}
				s.closing = append(s.closing, k)
			}
		})
	}
	err = s.ct.dump(endGen(s.n)<<markEndShift, markEndMask, func(e *ctEntry) {
		if t := s.tracked[trackKey{e.id, e.key}]; t != nil {
			t.sweep = s.sweeps
		}
	})
	if err != nil {
		return err
	}
	for k, t := range s.tracked {
		if !t.closing && t.sweep != s.sweeps {
			s.emit(&ctEntry{ctEvent: ctEvent{key: k.key, id: k.id, counts: t.counts}}, true, now)
			delete(s.tracked, k)
		}
	}
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
	if _, _, ok := readGenRules(nft); !ok {
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
