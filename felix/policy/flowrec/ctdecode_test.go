package flowrec

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/sirupsen/logrus"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/internal/testenv"
)

// libraryKey is how the collector named a conntrack event's connection
// when it decoded events with github.com/ti-mo/conntrack: the original
// source and port, the reply's source and port (the destination after
// DNAT), for ICMP the identifier and type.
func libraryKey(f *conntrack.Flow) flowKey {
	o, r := f.TupleOrig, f.TupleReply
	k := newFlowKey(o.IP.SourceAddress.Unmap(), r.IP.SourceAddress.Unmap(), o.Proto.Protocol, o.Proto.SourcePort, r.Proto.SourcePort)
	if o.Proto.ICMPv4 || o.Proto.ICMPv6 {
		k.sport, k.dport = o.Proto.ICMPID, uint16(o.Proto.ICMPType)
	}
	return k
}

// seenEvent is an event as the test compares it.
type seenEvent struct {
	key     flowKey
	destroy bool
	counts  counts
}

func (e seenEvent) String() string {
	kind := "NEW"
	if e.destroy {
		kind = "DESTROY"
	}
	return fmt.Sprintf("%s %s:%d -> %s:%d proto %d %+v", kind, e.key.srcAddr(), e.key.sport, e.key.dstAddr(), e.key.dport, e.key.proto, e.counts)
}

// TestConntrackDecodeMatchesLibrary: the collector's own decoding of
// conntrack events (only the attributes it uses, recvmmsg into reused
// buffers) gives, for real connections in a namespace (TCP, UDP and
// ICMP echo over IPv4 and IPv6, and TCP through a DNAT), the same
// events, keys and counters as github.com/ti-mo/conntrack subscribed
// to the same events beside it.
func TestConntrackDecodeMatchesLibrary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables, conntrack)")
	}
	node := polab.NewNode(t)
	a := node.AddPod(t, "calidca", "10.66.0.1", "fd00:66::1")
	b := node.AddPod(t, "calidcb", "10.66.0.2", "fd00:66::2")
	polab.Serve(t, b.NS, 8080)
	// Conntrack tracks the node's forwarded traffic once a rule uses
	// it; 10.66.9.9:80 is b's 8080 through a DNAT.
	polab.Nft(t, node.NS, `
table inet ctdecode {
	chain forwarded {
		type filter hook forward priority 0;
		ct state new counter
	}
	chain prerouting {
		type nat hook prerouting priority -100;
		ip daddr 10.66.9.9 tcp dport 80 dnat ip to 10.66.0.2:8080
	}
}`)
	t.Cleanup(func() { polab.Nft(t, node.NS, "delete table inet ctdecode") })
	if err := EnableAccounting(node.Fd); err != nil {
		t.Fatal(err)
	}

	var lost atomic.Uint64
	ours, err := openConntrack(node.Fd, &lost, logrus.WithField("component", "test"))
	if err != nil {
		t.Fatal(err)
	}
	lib, err := conntrack.Dial(&netlink.Config{NetNS: node.Fd})
	if err != nil {
		t.Fatal(err)
	}
	libEvs := make(chan conntrack.Event, 1024)
	libErrs, err := lib.Listen(libEvs, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew, netfilter.GroupCTDestroy})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	readDone := make(chan struct{})
	t.Cleanup(func() { cancel(); ours.poke(); <-readDone; ours.close(); lib.Close() })

	var mu sync.Mutex
	var got, want []seenEvent
	// The collector's loop's use of the socket: read what is queued,
	// wait for it in poll(2) with a timeout.
	go func() {
		defer close(readDone)
		for ctx.Err() == nil {
			n, _ := ours.read(func(e *ctEvent) {
				mu.Lock()
				got = append(got, seenEvent{key: e.key, destroy: e.destroy, counts: e.counts})
				mu.Unlock()
			})
			if n == 0 {
				ours.arm(time.Now().Add(100 * time.Millisecond))
				ours.wait(nil)
			}
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-libErrs:
				t.Errorf("the library's conntrack listener: %v", err)
				return
			case ev := <-libEvs:
				if ev.Flow == nil || (ev.Type != conntrack.EventNew && ev.Type != conntrack.EventDestroy) {
					continue
				}
				f := ev.Flow
				mu.Lock()
				want = append(want, seenEvent{key: libraryKey(f), destroy: ev.Type == conntrack.EventDestroy,
					counts: counts{pktsOut: f.CountersOrig.Packets, bytesOut: f.CountersOrig.Bytes, pktsIn: f.CountersReply.Packets, bytesIn: f.CountersReply.Bytes}})
				mu.Unlock()
			}
		}
	}()

	probes := []polab.Probe{{Proto: "tcp", Dst: netip.MustParseAddr("10.66.9.9"), Port: 80}}
	for _, v6 := range []bool{false, true} {
		probes = append(probes, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, polab.Probe{Proto: "udp", Dst: b.Addr(v6), Port: 8080},
			polab.Probe{Proto: "icmp", Dst: b.Addr(v6)})
	}
	for _, p := range probes {
		polab.Expect(t, a.NS, p, true, "a->"+p.String())
	}
	// Every connection's NEW, then (the table flushed) its DESTROY
	// with its counters.
	wait := func(what string, n int) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
			mu.Lock()
			g, w := len(got), len(want)
			mu.Unlock()
			if g < n || w < n {
				return fmt.Sprintf("%s: %d events decoded here and %d by the library, want %d each", what, g, w, n)
			}
			return ""
		})
	}
	wait("NEW events", len(probes))
	flusher, err := conntrack.Dial(&netlink.Config{NetNS: node.Fd})
	if err != nil {
		t.Fatal(err)
	}
	defer flusher.Close()
	if err := flusher.Flush(); err != nil {
		t.Fatal(err)
	}
	wait("DESTROY events", 2*len(probes))
	mu.Lock()
	defer mu.Unlock()
	if lost.Load() != 0 {
		t.Errorf("%d overruns reading events", lost.Load())
	}
	if !slices.Equal(got, want) {
		t.Errorf("decoded events differ from the library's:\nhere:\n%s\nlibrary:\n%s", list(got), list(want))
	}
	var destroys int
	for _, e := range got {
		if e.destroy {
			destroys++
			if e.counts.pktsOut == 0 || e.counts.pktsIn == 0 || e.counts.bytesOut == 0 || e.counts.bytesIn == 0 {
				t.Errorf("a DESTROY without its counters: %s", e)
			}
		}
	}
	if destroys != len(probes) {
		t.Errorf("%d DESTROY events for %d connections:\n%s", destroys, len(probes), list(got))
	}
	t.Logf("%d events alike:\n%s", len(got), list(got))
}

func list(evs []seenEvent) string {
	var s string
	for _, e := range evs {
		s += e.String() + "\n"
	}
	return s
}

// nlAttr builds a netlink attribute (nested when typ has NLA_F_NESTED).
func nlAttr(typ uint16, payload ...[]byte) []byte {
	var v []byte
	for _, p := range payload {
		v = append(v, p...)
	}
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ctMessage is a conntrack event message of type typ and flags for a
// TCP connection 10.0.0.1:1234 -> 10.0.0.9:80 DNATed to 10.0.0.2:8080,
// with counters.
func ctMessage(typ, flags uint16) []byte {
	const nested = 0x8000
	be16 := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	be64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	tuple := func(t uint16, src, dst string, sport, dport uint16) []byte {
		return nlAttr(t|nested,
			nlAttr(ctaTupleIP|nested, nlAttr(ctaIPv4Src, netip.MustParseAddr(src).AsSlice()), nlAttr(2, netip.MustParseAddr(dst).AsSlice())),
			nlAttr(ctaTupleProto|nested, nlAttr(ctaProtoNum, []byte{6}), nlAttr(ctaProtoSrcPort, be16(sport)), nlAttr(3, be16(dport))))
	}
	body := slices.Concat([]byte{unix.AF_INET, 0, 0, 0},
		tuple(ctaTupleOrig, "10.0.0.1", "10.0.0.9", 1234, 80),
		tuple(ctaTupleReply, "10.0.0.2", "10.0.0.1", 8080, 1234),
		nlAttr(3, []byte{0, 0, 0, 8}), // CTA_STATUS, skipped
		nlAttr(ctaCountersOrig|nested, nlAttr(ctaCountersPackets, be64(3)), nlAttr(ctaCountersBytes, be64(180))),
		nlAttr(ctaCountersReply|nested, nlAttr(ctaCountersPackets, be64(2)), nlAttr(ctaCountersBytes, be64(120))))
	h := binary.NativeEndian.AppendUint32(nil, uint32(16+len(body)))
	h = binary.NativeEndian.AppendUint16(h, unix.NFNL_SUBSYS_CTNETLINK<<8|typ)
	h = binary.NativeEndian.AppendUint16(h, flags)
	h = append(h, make([]byte, 8)...)
	return append(h, body...)
}

// TestDecodeCtMessages: NEW (CREATE|EXCL) and DESTROY messages in one
// datagram give their events (the key after DNAT, the counters);
// UPDATE (a NEW without CREATE and EXCL) and other messages are
// skipped.
func TestDecodeCtMessages(t *testing.T) {
	at := time.Now()
	dgram := slices.Concat(ctMessage(ctMsgNew, unix.NLM_F_CREATE|unix.NLM_F_EXCL), ctMessage(ctMsgNew, 0), ctMessage(1, 0), ctMessage(ctMsgDelete, 0))
	evs := appendCtEvents(nil, dgram, at)
	k := newFlowKey(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 6, 1234, 8080)
	n := counts{pktsOut: 3, bytesOut: 180, pktsIn: 2, bytesIn: 120}
	want := []ctEvent{{key: k, counts: n, at: at}, {key: k, destroy: true, counts: n, at: at}}
	if !slices.Equal(evs, want) {
		t.Errorf("decoded %+v, want %+v", evs, want)
	}
}

// FuzzAppendCtEvents: no datagram, however cut or garbled, makes the
// decoder fail or read out of bounds.
func FuzzAppendCtEvents(f *testing.F) {
	m := ctMessage(ctMsgDelete, 0)
	f.Add(m)
	f.Add(m[:len(m)/2])
	f.Add(slices.Concat(m, m[:30]))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = appendCtEvents(nil, b, time.Time{})
	})
}
