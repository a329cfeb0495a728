package flowrec

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// waker is the eventfd a source's wait polls beside its own descriptor,
// so that poke (a mark queued, the collector's end) ends the wait from
// any goroutine.
type waker struct {
	mu  sync.Mutex // guards efd against poke after close (its number could be another file's by then)
	efd int
}

func newWaker() (*waker, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("flowrec: eventfd: %w", err)
	}
	return &waker{efd: efd}, nil
}

// poll waits until one of fds is readable, poke was called or until
// passed; a poke is consumed.
func (w *waker) poll(pfd []unix.PollFd, fds []int, until time.Time) ([]unix.PollFd, error) {
	pfd = append(pfd[:0], unix.PollFd{Fd: int32(w.efd), Events: unix.POLLIN})
	for _, fd := range fds {
		pfd = append(pfd, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	d := time.Until(until)
	if d <= 0 {
		return pfd, nil
	}
	ms := int(min((d+time.Millisecond-1)/time.Millisecond, math.MaxInt32))
	if _, err := unix.Poll(pfd, ms); err != nil && !errors.Is(err, unix.EINTR) {
		return pfd, err
	}
	if pfd[0].Revents != 0 {
		var b [8]byte
		_, _ = unix.Read(w.efd, b[:])
	}
	return pfd, nil
}

// poke ends a wait (any goroutine may call it).
func (w *waker) poke() {
	one := [8]byte{1}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.efd >= 0 {
		_, _ = unix.Write(w.efd, one[:])
	}
}

func (w *waker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.efd >= 0 {
		unix.Close(w.efd)
		w.efd = -1
	}
}
