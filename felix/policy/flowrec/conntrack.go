package flowrec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
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
	// ctBatchWait is how long the reader lets events gather in the
	// socket after handing a batch over: one wake-up of the reader and
	// of the collector per batch, not per event. Connections wait
	// 400 ms for their marks anyway.
	ctBatchWait = 10 * time.Millisecond
	// ctMaxBatch caps the events of one batch.
	ctMaxBatch = 4096
	// ctBatches is how many batches are in flight between the reader
	// and the collector (their slices are reused).
	ctBatches = 64
)

// ctReader reads conntrack NEW and DESTROY events from a netlink socket
// of its own and hands them to the collector in batches.
type ctReader struct {
	netnsFd int
	fd      int
	out     chan []ctEvent
	free    chan []ctEvent
	lost    *atomic.Uint64
	log     *logrus.Entry
	done    chan struct{}
}

// openConntrack subscribes to conntrack's NEW and DESTROY events (not
// UPDATE) in the namespace (-1: the caller's). A receive buffer the
// kernel overran is counted in lost, and so is a socket that failed
// (run subscribes again): the events missed are lost, their
// connections end without a record, their counts in the batch's
// dropped.
func openConntrack(netnsFd int, lost *atomic.Uint64, log *logrus.Entry) (*ctReader, error) {
	fd, err := subscribeConntrack(netnsFd)
	if err != nil {
		return nil, err
	}
	return &ctReader{netnsFd: netnsFd, fd: fd, out: make(chan []ctEvent, ctBatches), free: make(chan []ctEvent, ctBatches),
		lost: lost, log: log, done: make(chan struct{})}, nil
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
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("flowrec: conntrack socket: %w", err)
	}
	return fd, nil
}

// run reads events until ctx ends, then closes the socket. A socket
// that fails is counted in lost and replaced.
func (r *ctReader) run(ctx context.Context) {
	defer close(r.done)
	for {
		err := r.serve(ctx)
		unix.Close(r.fd)
		if err == nil {
			return
		}
		r.lost.Add(1)
		r.log.WithError(err).Warn("flowrec: conntrack event socket failed; subscribing again")
		for {
			if r.fd, err = subscribeConntrack(r.netnsFd); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// serve reads the socket until ctx ends (nil) or it fails. While
// events come it reads a batch every ctBatchWait; it waits in poll
// only once a read found the socket empty.
func (r *ctReader) serve(ctx context.Context) error {
	rv := newCtRecv(r.fd)
	pfd := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
	var evs []ctEvent
	empty := true
	for ctx.Err() == nil {
		if empty {
			// Wake up every 100 ms to see whether the reader is done.
			if _, err := unix.Poll(pfd, 100); err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("polling the conntrack socket: %w", err)
			}
		}
		if evs == nil {
			select {
			case evs = <-r.free:
			default:
				evs = make([]ctEvent, 0, 256)
			}
		}
		var rerr error
		evs, rerr = r.read(rv, evs)
		// Events read before a failure are handed over too.
		if len(evs) > 0 {
			select {
			case r.out <- evs:
			case <-ctx.Done():
				return nil
			}
		}
		if rerr != nil {
			return fmt.Errorf("reading conntrack events: %w", rerr)
		}
		empty = len(evs) == 0
		full := len(evs) >= ctMaxBatch
		if !empty {
			evs = nil
			if !full {
				time.Sleep(ctBatchWait)
			}
		}
	}
	return nil
}

// recycle gives a batch's slice back to the reader.
func (r *ctReader) recycle(evs []ctEvent) {
	select {
	case r.free <- evs[:0]:
	default:
	}
}
