package flowrec

import (
	"errors"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// ctSlots is how many datagrams one recvmmsg takes, ctSlotBytes
	// the room for each: a conntrack event is a few hundred bytes
	// (its tuples, status, protocol info, counters); one that does
	// not fit is cut (MSG_TRUNC) and counted as lost.
	ctSlots     = 64
	ctSlotBytes = 4096
)

// mmsghdr is struct mmsghdr (linux/socket.h). Go pads it as C does on
// every architecture (to the alignment of Msghdr's pointers: 64 bytes
// on 64-bit, 32 on 32-bit), where a written-out 4-byte pad was right on
// 64-bit only.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// ctRecv reads many datagrams of a netlink socket with one system call
// (recvmmsg), into buffers it reuses.
type ctRecv struct {
	fd   int
	buf  []byte
	iovs []unix.Iovec
	msgs []mmsghdr
}

func newCtRecv(fd int) *ctRecv {
	r := &ctRecv{fd: fd, buf: make([]byte, ctSlots*ctSlotBytes), iovs: make([]unix.Iovec, ctSlots), msgs: make([]mmsghdr, ctSlots)}
	for i := range r.msgs {
		r.iovs[i].Base = &r.buf[i*ctSlotBytes]
		r.iovs[i].SetLen(ctSlotBytes)
		r.msgs[i].hdr.Iov = &r.iovs[i]
		r.msgs[i].hdr.SetIovlen(1)
	}
	return r
}

// readQueued appends the events queued in the socket (up to
// ctMaxBatch). At a receive buffer overrun (ENOBUFS) the events the
// kernel dropped count in lost, as its drop counter says (one, if it
// cannot be read); a cut datagram counts one.
func (s *ctSock) readQueued(evs []ctEvent) ([]ctEvent, error) {
	rv := s.rv
	now := time.Now()
	for len(evs) < ctMaxBatch {
		for i := range rv.msgs {
			rv.msgs[i].hdr.Flags, rv.msgs[i].len = 0, 0
		}
		// A raw system call: recvmmsg with MSG_DONTWAIT never
		// blocks, and one of 64 events takes longer than sysmon's
		// 20 µs tick, so as an ordinary call the runtime would hand
		// this goroutine's processor to another thread (waking it)
		// during most of them, take it back after, and keep sysmon
		// polling every 20 µs: more CPU than the events' decoding.
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(rv.fd), uintptr(unsafe.Pointer(&rv.msgs[0])), ctSlots, unix.MSG_DONTWAIT, 0, 0)
		if errno != 0 {
			switch err := error(errno); {
			case errors.Is(err, unix.EAGAIN):
				return evs, nil
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS):
				if !s.countDrops() {
					s.lost.Add(1)
				}
				continue
			default:
				return evs, err
			}
		}
		for i := range int(n) {
			m := &rv.msgs[i]
			if m.hdr.Flags&unix.MSG_TRUNC != 0 {
				s.lost.Add(1)
				continue
			}
			evs = appendCtEvents(evs, rv.buf[i*ctSlotBytes:i*ctSlotBytes+int(m.len)], now)
		}
		if int(n) < ctSlots {
			return evs, nil
		}
	}
	return evs, nil
}
