package polab

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// nfnetlink_log's message and attribute numbers (linux/netfilter/
// nfnetlink_log.h), which x/sys/unix does not carry.
const (
	nfulnlMsgPacket  = 0
	nfulnlMsgConfig  = 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulnlCmdBind    = 1
	nfulnlCopyPacket = 2
	nfulaPrefix      = 10
)

// NFLOG binds to an nflog group in the namespace, as a logging daemon
// would, and returns the prefixes of the packets logged there. The
// socket closes when the test ends.
func NFLOG(t testing.TB, n *nstest.NS, group uint16) <-chan string {
	t.Helper()
	var fd int
	n.Do(t, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	})
	send := func(attrType uint16, payload []byte) {
		t.Helper()
		attr := nlattr(attrType, payload)
		msg := make([]byte, 16, 16+4+len(attr))
		binary.NativeEndian.PutUint32(msg[0:], uint32(16+4+len(attr)))
		binary.NativeEndian.PutUint16(msg[4:], unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgConfig)
		binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
		msg = append(msg, unix.AF_UNSPEC, 0, byte(group>>8), byte(group))
		msg = append(msg, attr...)
		if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			t.Fatalf("nflog config: %v", err)
		}
		buf := make([]byte, 4096)
		k, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || k < 20 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR || binary.NativeEndian.Uint32(buf[16:]) != 0 {
			t.Fatalf("nflog config for group %d refused (%v, % x)", group, err, buf[:min(k, 24)])
		}
	}
	send(nfulaCfgCmd, []byte{nfulnlCmdBind})
	send(nfulaCfgMode, []byte{0, 0, 0xff, 0xff, nfulnlCopyPacket, 0})

	// A blocked recvfrom does not return when another thread closes the
	// socket: wake up every 100ms to see whether the test is over.
	tv := unix.Timeval{Usec: 100_000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 64)
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-done; unix.Close(fd) })
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-stop:
				return
			default:
			}
			k, _, err := unix.Recvfrom(fd, buf, 0)
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			if err != nil || k == 0 {
				return
			}
			for b := buf[:k]; len(b) >= 16; {
				l := int(binary.NativeEndian.Uint32(b))
				if l < 16 || l > len(b) {
					break
				}
				if binary.NativeEndian.Uint16(b[4:]) == unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket && l > 20 {
					if p, ok := attr(b[20:l], nfulaPrefix); ok {
						select {
						case out <- string(bytes.TrimRight(p, "\x00")):
						default:
						}
					}
				}
				b = b[min(len(b), (l+3)&^3):]
			}
		}
	}()
	return out
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

// attr finds one netlink attribute in a list.
func attr(b []byte, typ uint16) ([]byte, bool) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return nil, false
		}
		if binary.NativeEndian.Uint16(b[2:])&0x3fff == typ {
			return b[4:l], true
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	return nil, false
}
