package flowrec

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// ctSock is the collector's conntrack event subscription: a netlink
// socket of its own, read by the collector's goroutine (Collector.loop)
// without a reader goroutine in between, so one wake-up reads a batch
// and handles it end to end.
//
// It is not in Go's network poller: the poller registers a socket
// edge-triggered for good, so every datagram (every NEW and every
// DESTROY) would wake the poller's thread, even while the loop lets a
// batch gather and waits for nothing. The loop waits for it in poll(2)
// only once a read found it empty, with the next due time as the
// timeout, beside an eventfd that poke writes (a mark queued while the
// loop waits, ctx's end).
//
// Every event the kernel could not queue (its receive buffer full) is
// counted in lost: the socket's drop counter (countDrops) says how
// many, where the ENOBUFS a read gets says only that some were. A
// socket that failed counts one more (the collector subscribes again
// after ctRetry; what it missed meanwhile is not known). The
// connections of the events missed end without a record; their number
// is the batch's ct-overrun.
type ctSock struct {
	netnsFd int
	lost    *atomic.Uint64
	log     *logrus.Entry

	fd int // -1 while failed
	rv *ctRecv
	// drops is the socket's drop counter (SK_MEMINFO_DROPS) counted
	// in lost so far; a new socket's starts at 0.
	drops uint32
	// retryAt is when a failed socket subscribes again.
	retryAt time.Time
	evs     []ctEvent
	until   time.Time
	pfd     []unix.PollFd
	*waker
}

// openConntrack subscribes to conntrack's NEW and DESTROY events (not
// UPDATE) in the namespace (-1: the caller's). A subscription that
// fails is not an error: the socket starts failed (counted and logged)
// and read subscribes again every ctRetry, so a namespace or netlink
// trouble at felix's start does not turn flow records off for good.
// Only the eventfd's failure is.
func openConntrack(netnsFd int, lost *atomic.Uint64, log *logrus.Entry) (*ctSock, error) {
	w, err := newWaker()
	if err != nil {
		return nil, err
	}
	s := &ctSock{netnsFd: netnsFd, lost: lost, log: log, fd: -1, waker: w, evs: make([]ctEvent, 0, 256)}
	if err := s.subscribe(); err != nil {
		s.lost.Add(1)
		s.log.WithError(err).Error("flowrec: conntrack events: subscribing failed; trying again every second: connections end without a record until it works")
		s.retryAt = time.Now().Add(ctRetry)
	}
	return s, nil
}

func (s *ctSock) subscribe() error {
	fd, err := subscribeConntrack(s.netnsFd)
	if err != nil {
		return err
	}
	s.fd, s.rv, s.drops = fd, newCtRecv(fd), 0
	return nil
}

// countDrops adds to lost the events the kernel dropped since the last
// call (its drop counter counts each event it could not queue, where a
// read's ENOBUFS says only that some were), and says whether it could
// read the counter. The loop calls it at each ENOBUFS and each flush
// (drops after an ENOBUFS, while the buffer is still full, get no
// ENOBUFS of their own), and before a failed socket is closed.
func (s *ctSock) countDrops() bool {
	if s.fd < 0 {
		return false
	}
	n, err := socketDrops(s.fd)
	if err != nil {
		s.log.WithError(err).Debug("flowrec: conntrack events: reading the socket's drop counter")
		return false
	}
	// The counter is 32 bits and wraps; the difference wraps with it.
	s.lost.Add(uint64(n - s.drops))
	s.drops = n
	return true
}

// socketDrops reads a socket's drop counter: SK_MEMINFO_DROPS of
// getsockopt(SOL_SOCKET, SO_MEMINFO), Linux 4.12 on.
func socketDrops(fd int) (uint32, error) {
	var mi [unix.SK_MEMINFO_VARS]uint32
	l := uint32(unsafe.Sizeof(mi))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return 0, fmt.Errorf("flowrec: getsockopt SO_MEMINFO: %w", errno)
	}
	if l < (unix.SK_MEMINFO_DROPS+1)*4 {
		return 0, fmt.Errorf("flowrec: getsockopt SO_MEMINFO: %d bytes, no drop counter", l)
	}
	return mi[unix.SK_MEMINFO_DROPS], nil
}

// read hands the events queued in the socket (up to ctMaxBatch) to fn
// without waiting, and says how many there were and whether the batch
// was full (more may be queued). A socket that fails is closed and
// counted; read subscribes again once ctRetry passed.
func (s *ctSock) read(fn func(*ctEvent)) (n int, full bool) {
	if s.fd < 0 {
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

// fail closes a socket that failed, counts what its drop counter has
// not said yet and one more for the events missed until the next
// subscription (their number is not known), and has read subscribe
// again after ctRetry.
func (s *ctSock) fail(err error) {
	s.countDrops()
	s.lost.Add(1)
	s.log.WithError(err).Warn("flowrec: conntrack event socket failed; subscribing again")
	s.closeSocket()
	s.retryAt = time.Now().Add(ctRetry)
}

// arm sets the time the next wait ends; a poke from here on ends it at
// once (the eventfd stays readable until wait reads it).
func (s *ctSock) arm(until time.Time) { s.until = until }

// wait blocks until the socket may have events, the armed time passed
// or poke was called (while the socket is failed: until the time to
// subscribe again at the latest). It never takes marks itself.
func (s *ctSock) wait(<-chan mark) (mark, bool) {
	until := s.until
	var fds []int
	if s.fd >= 0 {
		fds = []int{s.fd}
	} else if s.retryAt.Before(until) {
		until = s.retryAt
	}
	var err error
	if s.pfd, err = s.poll(s.pfd, fds, until); err != nil && s.fd >= 0 {
		s.fail(fmt.Errorf("waiting for conntrack events: %w", err))
	}
	return mark{}, false
}

// settle sleeps ctBatchWait: events gather in the socket meanwhile
// (marks in their channel), to be read on one wake-up.
func (s *ctSock) settle() { time.Sleep(ctBatchWait) }

func (s *ctSock) closeSocket() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd, s.rv = -1, nil
	}
}

// close releases the socket and the eventfd.
func (s *ctSock) close() {
	s.closeSocket()
	s.waker.close()
}
