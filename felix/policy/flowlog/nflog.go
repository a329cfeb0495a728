// Package flowlog reads the packets the policy dataplane logs through
// nflog (the Log action, and drops when drop logging is on), decodes
// their addresses and ports, and keeps the resolved records in a
// bounded ring that readers follow.
package flowlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nfnetlink_log's message and attribute numbers (linux/netfilter/
// nfnetlink_log.h), which x/sys/unix does not carry.
const (
	msgPacket      = 0
	msgConfig      = 1
	attrTimestamp  = 3
	attrIfIndexIn  = 4
	attrIfIndexOut = 5
	attrPayload    = 9
	attrPrefix     = 10
	cfgCmd         = 1
	cfgMode        = 2
	cfgTimeout     = 4
	cfgQThresh     = 5
	cmdBind        = 1
	copyPacket     = 2
	// copyRange bytes of each packet are copied: the IPv6 header, a
	// chain of extension headers (ParseFlow walks them) and the
	// transport header fit; a longer chain is reported Incomplete.
	copyRange       = 256
	flushTimeout    = 10 // 1/100 s: a record reaches readers within 100 ms
	flushThreshold  = 32
	nfnlHeaderBytes = 16 + 4 // nlmsghdr + nfgenmsg
)

// ErrOverrun means the kernel dropped log messages because the reader
// fell behind (ENOBUFS); reading goes on.
var ErrOverrun = errors.New("flowlog: nflog socket overrun, records were lost")

// Packet is one packet nflog delivered.
type Packet struct {
	Prefix                string
	InIfindex, OutIfindex uint32
	// Payload starts at the network header (cut at copyRange bytes).
	Payload []byte
	Time    time.Time
}

// Reader is a socket bound to one nflog group in one network namespace.
// Run waits for it in Go's network poller: no thread sits blocked in a
// system call for it (a blocked one has its processor handed to
// another thread, and each return from it sets sysmon polling every
// 20 µs for a while).
type Reader struct {
	fd    int
	f     *os.File // owns fd once Open configured it
	group uint16
}

// Open binds nflog group in the namespace netnsFd (-1: the caller's).
// Only one socket may bind a group in a namespace: a second Open fails.
func Open(netnsFd int, group uint16) (*Reader, error) {
	fd, err := socketIn(netnsFd)
	if err != nil {
		return nil, fmt.Errorf("flowlog: nflog socket: %w", err)
	}
	r := &Reader{fd: fd, group: group}
	cfg := []struct {
		typ  uint16
		data []byte
	}{
		{cfgCmd, []byte{cmdBind}},
		{cfgMode, []byte{0, 0, copyRange >> 8, copyRange & 0xff, copyPacket, 0}},
		{cfgTimeout, binary.BigEndian.AppendUint32(nil, flushTimeout)},
		{cfgQThresh, binary.BigEndian.AppendUint32(nil, flushThreshold)},
	}
	for _, c := range cfg {
		if err := r.config(c.typ, c.data); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("flowlog: nflog group %d: %w", group, err)
		}
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	// Non-blocking from here, os.NewFile registers it with the poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("flowlog: nflog socket: %w", err)
	}
	r.f = os.NewFile(uintptr(fd), "nflog")
	return r, nil
}

// NetfilterSocket returns a bound NETLINK_NETFILTER socket created in
// the namespace netnsFd (-1: the caller's), for a reader of its own
// (the flow collector's conntrack events).
func NetfilterSocket(netnsFd int) (int, error) { return socketIn(netnsFd) }

// socketIn creates the netlink socket inside the namespace.
func socketIn(netnsFd int) (int, error) {
	open := func() (int, error) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return -1, err
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	if netnsFd < 0 {
		return open()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return -1, err
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(netnsFd)); err != nil {
		return -1, err
	}
	fd, err := open()
	if rerr := netns.Set(orig); rerr != nil {
		// The thread is in the wrong namespace: never let it run
		// anything else (it is not unlocked, so it exits with the
		// goroutine's end).
		runtime.LockOSThread()
		if err == nil {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("restoring the namespace: %w", rerr)
	}
	return fd, err
}

// config sends one configuration attribute for the group and waits for
// the kernel's answer.
func (r *Reader) config(typ uint16, payload []byte) error {
	attr := nlattr(typ, payload)
	msg := make([]byte, 16, nfnlHeaderBytes+len(attr))
	binary.NativeEndian.PutUint32(msg[0:], uint32(nfnlHeaderBytes+len(attr)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NFNL_SUBSYS_ULOG<<8|msgConfig)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	msg = append(msg, unix.AF_UNSPEC, 0, byte(r.group>>8), byte(r.group))
	msg = append(msg, attr...)
	if err := unix.Sendto(r.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		k, _, err := unix.Recvfrom(r.fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if k < 20 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
			continue // a logged packet racing the configuration
		}
		if errno := int32(binary.NativeEndian.Uint32(buf[16:])); errno != 0 {
			return unix.Errno(-errno)
		}
		return nil
	}
}

// Close releases the socket (and the group).
func (r *Reader) Close() error { return r.f.Close() }

// Run reads until ctx ends, handing each packet to fn. An overrun is
// reported to fn's caller through lost (may be nil) and reading goes on.
func (r *Reader) Run(ctx context.Context, fn func(Packet), lost func()) error {
	rc, err := r.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("flowlog: nflog socket: %w", err)
	}
	// ctx's end wakes Run where it waits for the socket.
	stop := context.AfterFunc(ctx, func() { _ = r.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 1<<16)
	for ctx.Err() == nil {
		var k int
		var rerr error
		// The poller waits when the socket is empty (EAGAIN).
		err := rc.Read(func(fd uintptr) bool {
			k, rerr = unix.Read(int(fd), buf)
			return rerr != unix.EAGAIN
		})
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("flowlog: waiting for nflog: %w", err)
		case rerr == unix.EINTR:
			continue
		case rerr == unix.ENOBUFS:
			if lost != nil {
				lost()
			}
			continue
		case rerr != nil:
			return fmt.Errorf("flowlog: reading nflog: %w", rerr)
		}
		now := time.Now()
		for b := buf[:k]; len(b) >= 16; {
			l := int(binary.NativeEndian.Uint32(b))
			if l < 16 || l > len(b) {
				break
			}
			if binary.NativeEndian.Uint16(b[4:]) == unix.NFNL_SUBSYS_ULOG<<8|msgPacket && l > nfnlHeaderBytes {
				fn(parsePacket(b[nfnlHeaderBytes:l], now))
			}
			b = b[min(len(b), (l+3)&^3):]
		}
	}
	return ctx.Err()
}

// parsePacket reads a packet message's attributes.
func parsePacket(b []byte, now time.Time) Packet {
	p := Packet{Time: now}
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			break
		}
		v := b[4:l]
		switch binary.NativeEndian.Uint16(b[2:]) & 0x3fff {
		case attrPrefix:
			p.Prefix = string(trimNUL(v))
		case attrIfIndexIn:
			if len(v) == 4 {
				p.InIfindex = binary.BigEndian.Uint32(v)
			}
		case attrIfIndexOut:
			if len(v) == 4 {
				p.OutIfindex = binary.BigEndian.Uint32(v)
			}
		case attrPayload:
			p.Payload = append([]byte(nil), v...)
		case attrTimestamp:
			if len(v) == 16 {
				p.Time = time.Unix(int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))*1000)
			}
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	return p
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

func nlattr(typ uint16, payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
