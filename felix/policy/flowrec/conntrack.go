package flowrec

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// EnableAccounting turns on conntrack's packet and byte counters
// (net.netfilter.nf_conntrack_acct) in the namespace (-1: the
// caller's); connections that began before count from zero.
func EnableAccounting(netnsFd int) error {
	err := inNetns(netnsFd, func() error {
		return os.WriteFile("/proc/sys/net/netfilter/nf_conntrack_acct", []byte("1"), 0)
	})
	if err != nil {
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	return nil
}

// inNetns runs fn on a thread in the namespace (-1: the caller's), for
// what follows the thread's namespace (/proc/sys/net).
func inNetns(netnsFd int, fn func() error) error {
	if netnsFd < 0 {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(netnsFd)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err = fn()
	if rerr := netns.Set(orig); rerr != nil {
		// Leave the thread locked: it dies with this goroutine.
		return fmt.Errorf("flowrec: restoring the namespace: %w", rerr)
	}
	runtime.UnlockOSThread()
	return err
}

const (
	// ctRcvBuf is the conntrack socket's receive buffer (the kernel
	// doubles it): an event takes 1,280 bytes of it (a TCP NEW or
	// DESTROY of 204 bytes, measured), so at 10,000 connections a
	// second (20,000 events) it holds about 650 ms of events.
	ctRcvBuf = 8 << 20
	// ctBatchWait is how long the collector lets events gather in the
	// socket after it read some: one wake-up per batch, not per event.
	// Connections wait 400 ms for their marks anyway; 50 ms of events
	// at 10,000 connections a second fill 8 % of ctRcvBuf.
	ctBatchWait = 50 * time.Millisecond
	// ctMaxBatch caps the events of one read.
	ctMaxBatch = 4096
	// ctRetry is how long a failed conntrack socket waits before it
	// subscribes again.
	ctRetry = time.Second
)

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
	// Non-blocking: the collector's goroutine reads it only when
	// poll(2) or a batch's settle says it may have events, and must
	// never block in a read (ctsock.go).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("flowrec: conntrack socket: %w", err)
	}
	return fd, nil
}
