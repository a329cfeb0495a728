package flowrec

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// bpfRing is the ring buffer's size: 4 MiB holds about 30,000 records,
// 3 s of 10,000 connections a second (NEW and DESTROY each), where the
// loop reads every ctBatchWait.
const bpfRing = 4 << 20

// bpfSource is the collector's conntrack source from the kernel's
// conntrack functions (bpfprog.go) instead of ctnetlink's events. It
// implements ctSource as ctSock does: read drains the ring buffer
// without waiting, wait polls the ring buffer's map (readable when it
// holds records) beside an eventfd that poke writes. The kernel wakes
// a waiting reader only for a record written to an empty ring (the
// default of bpf_ringbuf_output), so records written while the loop
// lets a batch gather wake nobody.
type bpfSource struct {
	lost *atomic.Uint64
	log  *logrus.Entry

	// hooks are the functions the programs are attached to.
	hooks           [2]string
	events, lostMap *ebpf.Map
	// inflight holds the entries whose deletion was reported, until
	// nf_ct_delete returns (ctDoneProgram).
	inflight *ebpf.Map
	links    []link.Link
	progs    []*ebpf.Program
	rd       *ringbuf.Reader
	rec      ringbuf.Record
	evs      []ctEvent
	// seenLost is lostMap's count already added to lost.
	seenLost uint64
	until    time.Time
	pfd      []unix.PollFd
	*waker
}

// probeHooks are the kernel functions of a connection's start and end.
var probeHooks = [2]string{hookConfirm, hookDelete}

// nsGetNstype is NS_GET_NSTYPE (linux/nsfs.h: _IO(0xb7, 0x3)), which
// x/sys/unix does not carry.
const nsGetNstype = 0xb703

// netnsInum is the inode number of the namespace netnsFd (-1: the
// caller's), as the kernel's struct net holds it. A descriptor that is
// not a network namespace is an error: the programs would keep another
// file's number and match nothing.
func netnsInum(netnsFd int) (uint32, error) {
	var st unix.Stat_t
	var err error
	if netnsFd < 0 {
		err = unix.Stat("/proc/thread-self/ns/net", &st)
	} else {
		typ, terr := unix.IoctlRetInt(netnsFd, nsGetNstype)
		if terr != nil || typ != unix.CLONE_NEWNET {
			return 0, fmt.Errorf("flowrec: descriptor %d is not a network namespace (NS_GET_NSTYPE: %d, %v)", netnsFd, typ, terr)
		}
		err = unix.Fstat(netnsFd, &st)
	}
	if err != nil {
		return 0, fmt.Errorf("flowrec: the namespace's inode: %w", err)
	}
	if st.Ino > math.MaxUint32 {
		return 0, fmt.Errorf("flowrec: the namespace's inode %d is past 32 bits", st.Ino)
	}
	return uint32(st.Ino), nil
}

// openBPF loads and attaches the programs for the namespace; an error
// names what the kernel refused (no BTF, no fexit, a layout not
// understood, no permission), and nothing stays loaded.
func openBPF(netnsFd int, hooks [2]string, lost *atomic.Uint64, log *logrus.Entry) (_ *bpfSource, err error) {
	inum, err := netnsInum(netnsFd)
	if err != nil {
		return nil, err
	}
	l, err := kernelLayout()
	if err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK (a no-op
	// on later ones, which charge the memory cgroup).
	if err := rlimit.RemoveMemlock(); err != nil {
		log.WithError(err).Debug("flowrec: raising RLIMIT_MEMLOCK for the conntrack programs")
	}
	w, err := newWaker()
	if err != nil {
		return nil, err
	}
	s := &bpfSource{lost: lost, log: log, waker: w, evs: make([]ctEvent, 0, 256)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.events, err = ebpf.NewMap(&ebpf.MapSpec{Name: "routed_ct_ev", Type: ebpf.RingBuf, MaxEntries: bpfRing})
	if err != nil {
		return nil, fmt.Errorf("flowrec: conntrack ring buffer: %w", err)
	}
	s.lostMap, err = ebpf.NewMap(&ebpf.MapSpec{Name: "routed_ct_lost", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("flowrec: conntrack lost counter: %w", err)
	}
	s.hooks = hooks
	s.inflight, err = ebpf.NewMap(&ebpf.MapSpec{Name: "routed_ct_del", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 4096})
	if err != nil {
		return nil, fmt.Errorf("flowrec: conntrack deletions map: %w", err)
	}
	var sb [8]byte
	if _, err := rand.Read(sb[:]); err != nil {
		return nil, fmt.Errorf("flowrec: the entries' id secret: %w", err)
	}
	secret := binary.NativeEndian.Uint64(sb[:])
	for _, hook := range []struct {
		name, fn string
		at       ebpf.AttachType
		insns    asm.Instructions
	}{
		{"routed_ct_new", hooks[0], ebpf.AttachTraceFExit, ctProgram(l, false, inum, secret, s.events, s.lostMap, s.inflight)},
		{"routed_ct_end", hooks[1], ebpf.AttachTraceFEntry, ctProgram(l, true, inum, secret, s.events, s.lostMap, s.inflight)},
		{"routed_ct_done", hooks[1], ebpf.AttachTraceFExit, ctDoneProgram(s.inflight)},
	} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         hook.name,
			Type:         ebpf.Tracing,
			AttachType:   hook.at,
			AttachTo:     hook.fn,
			Instructions: hook.insns,
			// bpf_probe_read_kernel and fexit need a GPL-compatible
			// program; this generated one is offered under it.
			License: "Dual BSD/GPL",
		})
		if err != nil {
			return nil, fmt.Errorf("flowrec: loading the conntrack program of %s: %w", hook.fn, err)
		}
		s.progs = append(s.progs, prog)
		lk, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: hook.at})
		if err != nil {
			return nil, fmt.Errorf("flowrec: attaching the conntrack program to %s: %w", hook.fn, err)
		}
		s.links = append(s.links, lk)
	}
	s.rd, err = ringbuf.NewReader(s.events)
	if err != nil {
		return nil, fmt.Errorf("flowrec: conntrack ring buffer reader: %w", err)
	}
	// Reads never block: the loop waits in wait.
	s.rd.SetDeadline(time.Unix(1, 0))
	return s, nil
}

// read hands the records queued (up to ctMaxBatch) to fn without
// waiting; full says more may be queued.
func (s *bpfSource) read(fn func(*ctEvent)) (n int, full bool) {
	evs := s.evs[:0]
	now := time.Now()
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	mono := ts.Nano()
	for len(evs) < ctMaxBatch {
		err := s.rd.ReadInto(&s.rec)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				s.log.WithError(err).Warn("flowrec: reading the conntrack ring buffer")
			}
			break
		}
		evs = append(evs, ctEvent{})
		if !decodeRecord(&evs[len(evs)-1], s.rec.RawSample, now, mono) {
			evs = evs[:len(evs)-1]
		}
	}
	for i := range evs {
		fn(&evs[i])
	}
	s.evs = evs[:0]
	return len(evs), len(evs) >= ctMaxBatch
}

// decodeRecord reads one ring buffer record into e; its time is the
// record's, on the wall clock of now (mono: CLOCK_MONOTONIC now).
func decodeRecord(e *ctEvent, b []byte, now time.Time, mono int64) bool {
	if len(b) < recSize {
		return false
	}
	var orig, reply ctTuple
	var origType uint8
	if !decodeRawTuple(&orig, &origType, b[recOrig:recOrig+tupleSize]) || !decodeRawTuple(&reply, nil, b[recReply:recReply+tupleSize]) {
		return false
	}
	e.destroy = b[recKind] == recDestroy
	e.id = binary.NativeEndian.Uint64(b[recID:])
	e.at = now.Add(-time.Duration(mono - int64(binary.NativeEndian.Uint64(b[recTime:]))))
	e.key = newFlowKey(orig.src, reply.src, orig.proto, orig.sport, reply.sport)
	if orig.proto == unix.IPPROTO_ICMP || orig.proto == unix.IPPROTO_ICMPV6 {
		e.key.sport, e.key.dport = orig.sport, uint16(origType)
	}
	c := b[recCounters:]
	e.counts = counts{pktsOut: binary.NativeEndian.Uint64(c), bytesOut: binary.NativeEndian.Uint64(c[8:]),
		pktsIn: binary.NativeEndian.Uint64(c[16:]), bytesIn: binary.NativeEndian.Uint64(c[24:])}
	return true
}

// decodeRawTuple reads a struct nf_conntrack_tuple (the layout
// kernelLayout checked): its source address and port (ICMP: the
// identifier) and protocol; icmpType, when not nil, gets dst.u's first
// byte (ICMP: the type).
func decodeRawTuple(t *ctTuple, icmpType *uint8, b []byte) bool {
	switch binary.NativeEndian.Uint16(b[18:]) {
	case unix.AF_INET:
		t.src = netip.AddrFrom4([4]byte(b[0:4]))
	case unix.AF_INET6:
		t.src = netip.AddrFrom16([16]byte(b[0:16]))
	default:
		return false
	}
	t.sport = binary.BigEndian.Uint16(b[16:])
	t.proto = b[38]
	if icmpType != nil {
		*icmpType = b[36]
	}
	return true
}

// countDrops adds to lost the records the ring buffer had no room for
// since the last call.
func (s *bpfSource) countDrops() bool {
	var n uint64
	if err := s.lostMap.Lookup(uint32(0), &n); err != nil {
		s.log.WithError(err).Debug("flowrec: reading the conntrack ring buffer's lost count")
		return false
	}
	s.lost.Add(n - s.seenLost)
	s.seenLost = n
	return true
}

func (s *bpfSource) arm(until time.Time) { s.until = until }

// wait blocks until the ring buffer holds records, the armed time
// passed or poke was called.
func (s *bpfSource) wait(<-chan mark) (mark, bool) {
	var err error
	if s.pfd, err = s.poll(s.pfd, []int{s.events.FD()}, s.until); err != nil {
		s.log.WithError(err).Warn("flowrec: waiting for the conntrack ring buffer")
		time.Sleep(ctBatchWait)
	}
	return mark{}, false
}

func (s *bpfSource) settle() { time.Sleep(ctBatchWait) }

// close detaches the programs and frees the maps.
func (s *bpfSource) close() {
	for _, l := range s.links {
		_ = l.Close()
	}
	for _, p := range s.progs {
		_ = p.Close()
	}
	if s.rd != nil {
		_ = s.rd.Close()
	}
	for _, m := range []*ebpf.Map{s.events, s.lostMap, s.inflight} {
		if m != nil {
			_ = m.Close()
		}
	}
	s.links, s.progs, s.rd, s.events, s.lostMap, s.inflight = nil, nil, nil, nil, nil, nil
	s.waker.close()
}
