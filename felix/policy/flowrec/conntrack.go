package flowrec

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// EnableAccounting turns on conntrack's packet and byte counters
// (net.netfilter.nf_conntrack_acct) in the namespace (-1: the
// caller's); connections that began before count from zero.
func EnableAccounting(netnsFd int) error {
	write := func() error {
		return os.WriteFile("/proc/sys/net/netfilter/nf_conntrack_acct", []byte("1"), 0)
	}
	if netnsFd < 0 {
		if err := write(); err != nil {
			return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
		}
		return nil
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(netnsFd)); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	// /proc/sys/net follows the thread's namespace.
	err = write()
	if rerr := netns.Set(orig); rerr != nil {
		// Leave the thread locked: it dies with this goroutine.
		return fmt.Errorf("flowrec: restoring the namespace: %w", rerr)
	}
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	return nil
}

const (
	// ctRcvBuf is the conntrack socket's receive buffer: at 10,000
	// connections a second (20,000 events of about 300 bytes) it holds
	// more than a second of events.
	ctRcvBuf = 8 << 20
	// ctBatchWait is how long the collector lets events gather in the
	// socket after it read some: one wake-up per batch, not per event.
	// Connections wait 400 ms for their marks anyway.
	ctBatchWait = 10 * time.Millisecond
	// ctMaxBatch caps the events of one read.
	ctMaxBatch = 4096
	// ctRetry is how long a failed conntrack socket waits before it
	// subscribes again.
	ctRetry = time.Second
)

// longAgo is a read deadline in the past: it wakes a wait at once.
var longAgo = time.Unix(1, 0)

// ctSock is the collector's conntrack event subscription: a netlink
// socket of its own, read by the collector's goroutine (Collector.loop)
// without a reader goroutine in between. The goroutine waits for it in
// Go's network poller (the socket is non-blocking, in an os.File), with
// the collector's next timer as the read deadline, so one wake-up reads
// a batch and handles it end to end.
//
// A receive buffer the kernel overran is counted in lost, and so is a
// socket that failed (the collector subscribes again after ctRetry):
// the events missed are lost, their connections end without a record,
// their counts in the batch's dropped.
type ctSock struct {
	netnsFd int
	lost    *atomic.Uint64
	log     *logrus.Entry

	f  *os.File // nil while failed
	rc syscall.RawConn
	rv *ctRecv
	// cur is f for poke, which runs on other goroutines.
	cur atomic.Pointer[os.File]
	// retryAt is when a failed socket subscribes again.
	retryAt time.Time
	evs     []ctEvent
	// wake ends a wait while the socket is failed (poke).
	wake  chan struct{}
	timer *time.Timer
	until time.Time
}

// openConntrack subscribes to conntrack's NEW and DESTROY events (not
// UPDATE) in the namespace (-1: the caller's).
func openConntrack(netnsFd int, lost *atomic.Uint64, log *logrus.Entry) (*ctSock, error) {
	s := &ctSock{netnsFd: netnsFd, lost: lost, log: log, evs: make([]ctEvent, 0, 256), wake: make(chan struct{}, 1)}
	if err := s.subscribe(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *ctSock) subscribe() error {
	fd, err := subscribeConntrack(s.netnsFd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "conntrack")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("flowrec: conntrack socket: %w", err)
	}
	s.f, s.rc, s.rv = f, rc, newCtRecv(fd)
	s.cur.Store(f)
	return nil
}

func subscribeConntrack(netnsFd int) (int, error) {
	fd, err := flowlog.NetfilterSocket(netnsFd)
	if err != nil {
		return -1, fmt.Errorf("flowrec: conntrack socket: %w", err)
	}
	for _, g := range []int{unix.NFNLGRP_CONNTRACK_NEW, unix.NFNLGRP_CONNTRACK_DESTROY} {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("flowrec: conntrack events (group %d): %w", g, err)
		}
	}
	// SO_RCVBUFFORCE passes net.core.rmem_max (felix runs with
	// CAP_NET_ADMIN); without it, as much as rmem_max allows.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, ctRcvBuf); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, ctRcvBuf)
	}
	// Non-blocking: os.NewFile registers it with the poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("flowrec: conntrack socket: %w", err)
	}
	return fd, nil
}

// read hands the events queued in the socket (up to ctMaxBatch) to fn
// without waiting, and says how many there were and whether the batch
// was full (more may be queued). A socket that fails is closed and
// counted; read subscribes again once ctRetry passed.
func (s *ctSock) read(fn func(*ctEvent)) (n int, full bool) {
	if s.f == nil {
		if time.Now().Before(s.retryAt) {
			return 0, false
		}
		if err := s.subscribe(); err != nil {
			s.log.WithError(err).Debug("flowrec: conntrack events: subscribing again failed")
			s.retryAt = time.Now().Add(ctRetry)
			return 0, false
		}
		s.log.Info("flowrec: conntrack events: subscribed again")
	}
	evs, err := s.readQueued(s.evs[:0])
	// Events read before a failure are handled too.
	for i := range evs {
		fn(&evs[i])
	}
	s.evs = evs[:0]
	if err != nil {
		s.fail(err)
	}
	return len(evs), len(evs) >= ctMaxBatch
}

// fail closes a socket that failed, counts it in lost (its events are)
// and has read subscribe again after ctRetry.
func (s *ctSock) fail(err error) {
	s.lost.Add(1)
	s.log.WithError(err).Warn("flowrec: conntrack event socket failed; subscribing again")
	s.close()
	s.retryAt = time.Now().Add(ctRetry)
}

// arm prepares a wait that ends at until: from here on a poke ends it
// at once, even one that comes before wait.
func (s *ctSock) arm(until time.Time) {
	s.until = until
	if s.f != nil {
		err := s.f.SetReadDeadline(until)
		if err == nil {
			return
		}
		// A socket the poller cannot wait for would have the loop
		// spin: it is a failed one.
		s.fail(fmt.Errorf("waiting for conntrack events: %w", err))
	}
	select {
	case <-s.wake:
	default:
	}
}

// wait blocks until the socket may have events, the armed deadline
// passed or poke was called. While the socket is failed it also ends
// at the time to subscribe again, or with a mark (returned).
func (s *ctSock) wait(marks <-chan mark) (mark, bool) {
	if s.f != nil {
		first := true
		// The poller waits when the first call says "not yet"; the
		// events are read by read, with MSG_DONTWAIT.
		_ = s.rc.Read(func(uintptr) bool {
			if first {
				first = false
				return false
			}
			return true
		})
		return mark{}, false
	}
	until := s.until
	if s.retryAt.Before(until) {
		until = s.retryAt
	}
	return waitChan(&s.timer, until, s.wake, marks)
}

// waitChan waits on channels until until (timer is reused).
func waitChan(timer **time.Timer, until time.Time, wake <-chan struct{}, marks <-chan mark) (mark, bool) {
	d := time.Until(until)
	if d <= 0 {
		return mark{}, false
	}
	if *timer == nil {
		*timer = time.NewTimer(d)
	} else {
		(*timer).Reset(d)
	}
	defer (*timer).Stop()
	select {
	case <-wake:
	case <-(*timer).C:
	case m := <-marks:
		return m, true
	}
	return mark{}, false
}

// settle sleeps ctBatchWait: events gather in the socket meanwhile
// (marks in their channel), to be read on one wake-up.
func (s *ctSock) settle() { time.Sleep(ctBatchWait) }

// poke ends a wait (any goroutine may call it).
func (s *ctSock) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if f := s.cur.Load(); f != nil {
		// A closed file's error is harmless: a new one is armed
		// before its wait.
		_ = f.SetReadDeadline(longAgo)
	}
}

// close releases the socket.
func (s *ctSock) close() {
	if s.f != nil {
		s.cur.Store(nil)
		s.f.Close()
		s.f, s.rc, s.rv = nil, nil, nil
	}
}
