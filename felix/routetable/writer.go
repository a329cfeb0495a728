package routetable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// batchSize is how many requests go into one sendmsg. Every request gets
// an ack skb in the receive queue; 256 of them fit comfortably in the
// receive buffer we ask for, so no ack is dropped (ENOBUFS).
const batchSize = 256

// rcvBuf is the receive buffer size requested (forced, as root).
const rcvBuf = 4 << 20

// KernelError is the kernel's answer to one request: the errno and, when
// the kernel sent one, its extended-ack message.
type KernelError struct {
	Errno unix.Errno
	Msg   string
}

func (e *KernelError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%v (%s)", e.Errno, e.Msg)
	}
	return e.Errno.Error()
}

// Unwrap lets errors.Is(err, unix.ESRCH) work.
func (e *KernelError) Unwrap() error { return e.Errno }

// batchWriter pipelines RTM_NEWROUTE/RTM_DELROUTE requests: it packs up to
// batchSize requests into one sendmsg and then collects their acks by
// sequence number. `ip -batch` waits for each ack before the next
// request; pipelining removes that round trip per route.
type batchWriter struct {
	sock *nl.NetlinkSocket
	fd   int
	seq  uint32
	buf  []byte
	rbuf []byte
}

func newBatchWriter(ns netns.NsHandle) (*batchWriter, error) {
	cur := netns.None()
	if ns.IsOpen() {
		var err error
		if cur, err = netns.Get(); err != nil {
			return nil, fmt.Errorf("routetable: current netns: %w", err)
		}
		defer cur.Close()
	}
	s, err := nl.GetNetlinkSocketAt(ns, cur, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("routetable: netlink socket: %w", err)
	}
	fd := s.GetFd()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	}
	// Errors then carry only the header of the failed request, plus the
	// kernel's explanation as an extended ack.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	tv := unix.Timeval{Sec: 10}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		s.Close()
		return nil, fmt.Errorf("routetable: netlink socket timeout: %w", err)
	}
	return &batchWriter{sock: s, fd: fd, rbuf: make([]byte, 1<<16)}, nil
}

func (w *batchWriter) close() { w.sock.Close() }

func (w *batchWriter) write(table int, ops []Op) []error {
	errs := make([]error, len(ops))
	for start := 0; start < len(ops); start += batchSize {
		end := min(start+batchSize, len(ops))
		w.writeBatch(table, ops[start:end], errs[start:end])
	}
	return errs
}

// writeBatch sends ops in one sendmsg and fills errs from the acks.
func (w *batchWriter) writeBatch(table int, ops []Op, errs []error) {
	w.buf = w.buf[:0]
	first := w.seq + 1
	for i, op := range ops {
		w.seq++
		w.buf = appendRouteMsg(w.buf, w.seq, table, op)
		errs[i] = errNoAck // until its ack arrives
	}
	fail := func(err error) {
		for i := range errs {
			if errs[i] == errNoAck {
				errs[i] = err
			}
		}
	}
	if err := unix.Sendto(w.fd, w.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		fail(fmt.Errorf("routetable: netlink send: %w", err))
		return
	}
	for pending := len(ops); pending > 0; {
		n, _, err := unix.Recvfrom(w.fd, w.rbuf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// ENOBUFS means acks were dropped; EAGAIN is the timeout.
			// Either way the outcome of the rest is unknown: the caller
			// resyncs from the kernel.
			fail(fmt.Errorf("routetable: netlink receive: %w", err))
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(w.rbuf[:n])
		if err != nil {
			fail(fmt.Errorf("routetable: parsing netlink reply: %w", err))
			return
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq < first || m.Header.Seq-first >= uint32(len(ops)) {
				continue
			}
			i := int(m.Header.Seq - first)
			if errs[i] != errNoAck {
				continue
			}
			errs[i] = parseAck(m, ops[i])
			pending--
		}
	}
}

// errNoAck marks a request whose ack has not arrived (yet).
var errNoAck = errors.New("routetable: no ack from the kernel")

// parseAck turns an NLMSG_ERROR into nil (success) or a KernelError.
func parseAck(m syscall.NetlinkMessage, op Op) error {
	if len(m.Data) < 4 {
		return fmt.Errorf("routetable: short netlink ack")
	}
	code := int32(binary.NativeEndian.Uint32(m.Data[:4]))
	if code == 0 {
		return nil
	}
	errno := unix.Errno(-code)
	if op.Delete && (errno == unix.ESRCH || errno == unix.ENOENT) {
		return nil // already gone: a delete's goal is met
	}
	ke := &KernelError{Errno: errno}
	// With NETLINK_CAP_ACK the error is followed by the request's header
	// only (16 bytes), then extended-ack attributes if the kernel set
	// NLM_F_ACK_TLVS.
	if m.Header.Flags&unix.NLM_F_ACK_TLVS != 0 && len(m.Data) > 4+unix.SizeofNlMsghdr {
		attrs, err := nl.ParseRouteAttr(m.Data[4+unix.SizeofNlMsghdr:])
		if err == nil {
			for _, a := range attrs {
				if a.Attr.Type == unix.NLMSGERR_ATTR_MSG {
					ke.Msg = string(trimNul(a.Value))
				}
			}
		}
	}
	return ke
}

func trimNul(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// appendRouteMsg encodes one rtnetlink route request.
func appendRouteMsg(b []byte, seq uint32, table int, op Op) []byte {
	r := op.Route
	start := len(b)
	typ := uint16(unix.RTM_NEWROUTE)
	flags := uint16(unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_REPLACE)
	rtType, scope := r.Type, r.Scope
	if op.Delete {
		typ = unix.RTM_DELROUTE
		flags = unix.NLM_F_REQUEST | unix.NLM_F_ACK
		// Match any type and scope, but only our protocol: the kernel
		// itself then refuses to delete a foreign route.
		rtType, scope = unix.RTN_UNSPEC, unix.RT_SCOPE_NOWHERE
	}
	rtTable := uint8(unix.RT_TABLE_UNSPEC)
	if table < 256 {
		rtTable = uint8(table)
	}
	var rtFlags uint32
	if r.OnLink && !op.Delete {
		rtFlags = unix.RTNH_F_ONLINK
	}
	ne := binary.NativeEndian
	// nlmsghdr; length patched below.
	b = ne.AppendUint32(b, 0)
	b = ne.AppendUint16(b, typ)
	b = ne.AppendUint16(b, flags)
	b = ne.AppendUint32(b, seq)
	b = ne.AppendUint32(b, 0)
	// rtmsg
	family := uint8(unix.AF_INET)
	if r.Dst.Addr().Is6() {
		family = unix.AF_INET6
	}
	b = append(b, family, uint8(r.Dst.Bits()), 0, r.Tos, rtTable, r.Protocol, scope, rtType)
	b = ne.AppendUint32(b, rtFlags)
	b = appendAttr(b, unix.RTA_TABLE, ne.AppendUint32(nil, uint32(table)))
	if r.Dst.Bits() > 0 {
		b = appendAttr(b, unix.RTA_DST, r.Dst.Addr().AsSlice())
	}
	if r.Priority != 0 {
		b = appendAttr(b, unix.RTA_PRIORITY, ne.AppendUint32(nil, r.Priority))
	}
	if !op.Delete {
		if r.Gw.IsValid() {
			b = appendAttr(b, unix.RTA_GATEWAY, r.Gw.AsSlice())
		}
		if r.LinkIndex != 0 {
			b = appendAttr(b, unix.RTA_OIF, ne.AppendUint32(nil, uint32(r.LinkIndex)))
		}
		if r.Src.IsValid() {
			b = appendAttr(b, unix.RTA_PREFSRC, r.Src.AsSlice())
		}
	}
	ne.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	ne := binary.NativeEndian
	l := 4 + len(data)
	b = ne.AppendUint16(b, uint16(l))
	b = ne.AppendUint16(b, typ)
	b = append(b, data...)
	for ; l%4 != 0; l++ {
		b = append(b, 0)
	}
	return b
}
