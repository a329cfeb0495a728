package flowrec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// ctnetlink's numbers for reading the table (linux/netfilter/
// nfnetlink_conntrack.h) beside those of ctdecode.go.
const (
	ctMsgGet = 1 // IPCTNL_MSG_CT_GET

	ctaProtoInfo = 4  // CTA_PROTOINFO
	ctaMark      = 8  // CTA_MARK (big-endian u32)
	ctaID        = 12 // CTA_ID (big-endian u32)
	ctaMarkMask  = 21 // CTA_MARK_MASK

	ctaProtoInfoTCP      = 1 // CTA_PROTOINFO_TCP
	ctaProtoInfoTCPState = 1 // CTA_PROTOINFO_TCP_STATE (u8)

	// TCP conntrack states (enum tcp_conntrack) after which no more
	// traffic is counted: the connection ended.
	tcpTimeWait = 7 // TCP_CONNTRACK_TIME_WAIT
	tcpClose    = 8 // TCP_CONNTRACK_CLOSE
)

// ctEntry is a conntrack entry as a dump or a get reads it.
type ctEntry struct {
	ctEvent // key, counters, id (CTA_ID)
	mark    uint32
	// tcpState is the TCP conntrack state (0 without one).
	tcpState uint8
	// orig is the entry's CTA_TUPLE_ORIG attribute as the kernel sent
	// it (valid only during the callback).
	orig []byte
}

// finished says no more traffic will be counted on the entry: a TCP
// connection in TIME_WAIT or CLOSE.
func (e *ctEntry) finished() bool {
	return e.key.proto == unix.IPPROTO_TCP && (e.tcpState == tcpTimeWait || e.tcpState == tcpClose)
}

// ctTable reads the conntrack table of one namespace through a netlink
// socket of its own (not subscribed to any event group, so the kernel
// keeps no event cache for it).
type ctTable struct {
	fd  int
	seq uint32
	buf []byte
}

func openCtTable(netnsFd int) (*ctTable, error) {
	fd, err := flowlog.NetfilterSocket(netnsFd)
	if err != nil {
		return nil, fmt.Errorf("flowrec: conntrack table socket: %w", err)
	}
	// A dump's replies come as fast as the kernel fills them; the
	// reader takes them as they come, so the default buffer suffices,
	// but a larger one lets each fill carry more entries.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	return &ctTable{fd: fd, buf: make([]byte, 256<<10)}, nil
}

func (t *ctTable) close() {
	if t.fd >= 0 {
		unix.Close(t.fd)
		t.fd = -1
	}
}

// dump reads every entry of both families whose mark & mask is mark
// (the kernel filters them; mask 0: all), handing each to fn.
func (t *ctTable) dump(mark, mask uint32, fn func(*ctEntry)) error {
	req := t.request(unix.AF_UNSPEC, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	if mask != 0 {
		req = appendU32Attr(req, ctaMark, mark)
		req = appendU32Attr(req, ctaMarkMask, mask)
	}
	return t.exchange(req, fn)
}

// get reads the entry whose original tuple is orig (a CTA_TUPLE_ORIG
// attribute as a dump gave it) of family fam; found is false when the
// table has none.
func (t *ctTable) get(fam uint8, orig []byte, fn func(*ctEntry)) (found bool, err error) {
	req := t.request(fam, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	req = append(req, orig...)
	err = t.exchange(req, func(e *ctEntry) { found = true; fn(e) })
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return found, err
}

// request starts a conntrack GET message (its length set by exchange).
func (t *ctTable) request(fam uint8, flags uint16) []byte {
	t.seq++
	req := make([]byte, nlmsgHeader+nfgenHeader, 128)
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_CTNETLINK<<8|ctMsgGet)
	binary.NativeEndian.PutUint16(req[6:], flags)
	binary.NativeEndian.PutUint32(req[8:], t.seq)
	req[nlmsgHeader] = fam // nfgenmsg: family, version 0, resource id 0
	return req
}

func appendU32Attr(b []byte, typ uint16, v uint32) []byte {
	var a [8]byte
	binary.NativeEndian.PutUint16(a[0:], 8)
	binary.NativeEndian.PutUint16(a[2:], typ)
	binary.BigEndian.PutUint32(a[4:], v)
	return append(b, a[:]...)
}

// exchange sends req and reads its answers to their end (NLMSG_DONE,
// an error or, for a request without a dump, its acknowledgement).
func (t *ctTable) exchange(req []byte, fn func(*ctEntry)) error {
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	if err := unix.Sendto(t.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("flowrec: conntrack request: %w", err)
	}
	seq := t.seq
	var e ctEntry
	for {
		n, _, err := unix.Recvfrom(t.fd, t.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("flowrec: reading the conntrack table: %w", err)
		}
		for b := t.buf[:n]; len(b) >= nlmsgHeader; {
			l := int(binary.NativeEndian.Uint32(b))
			if l < nlmsgHeader || l > len(b) {
				return fmt.Errorf("flowrec: reading the conntrack table: a malformed message")
			}
			typ := binary.NativeEndian.Uint16(b[4:])
			if binary.NativeEndian.Uint32(b[8:]) == seq {
				switch {
				case typ == unix.NLMSG_DONE:
					return nil
				case typ == unix.NLMSG_ERROR:
					if l < nlmsgHeader+4 {
						return fmt.Errorf("flowrec: reading the conntrack table: a short error message")
					}
					if code := int32(binary.NativeEndian.Uint32(b[nlmsgHeader:])); code != 0 {
						return unix.Errno(-code)
					}
					return nil // the acknowledgement of a get
				case typ>>8 == unix.NFNL_SUBSYS_CTNETLINK && l >= nlmsgHeader+nfgenHeader:
					e = ctEntry{}
					if decodeCtEntry(&e, b[nlmsgHeader+nfgenHeader:l]) {
						fn(&e)
					}
				}
			}
			b = b[min(len(b), (l+3)&^3):]
		}
	}
}

// decodeCtEntry reads what decodeCtEvent reads and the entry's id,
// mark, TCP state and original tuple.
func decodeCtEntry(e *ctEntry, b []byte) bool {
	if !decodeCtEvent(&e.ctEvent, b) {
		return false
	}
	for cur := b; ; {
		typ, v, rest, ok := nextAttr(cur)
		if !ok {
			break
		}
		switch {
		case typ == ctaTupleOrig:
			// With its header: a get sends it back as it is.
			e.orig = cur[:4+len(v)]
		case typ == ctaID && len(v) == 4:
			e.id = uint64(binary.BigEndian.Uint32(v)) | 1<<32
		case typ == ctaMark && len(v) == 4:
			e.mark = binary.BigEndian.Uint32(v)
		case typ == ctaProtoInfo:
			for pt, pv, prest, pok := nextAttr(v); pok; pt, pv, prest, pok = nextAttr(prest) {
				if pt != ctaProtoInfoTCP {
					continue
				}
				for st, sv, srest, sok := nextAttr(pv); sok; st, sv, srest, sok = nextAttr(srest) {
					if st == ctaProtoInfoTCPState && len(sv) >= 1 {
						e.tcpState = sv[0]
					}
				}
			}
		}
		cur = rest
	}
	return e.id != 0
}
