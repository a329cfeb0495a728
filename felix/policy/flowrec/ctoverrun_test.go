package flowrec

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/internal/testenv"
)

// overrunSlack is how far the events counted lost may be from the
// events created and not read: none is expected (one event, one
// datagram, each dropped one counted by the kernel), 1% allows for an
// event of the namespace's own.
const overrunSlack = 6

// TestConntrackOverrunCounted: events the kernel could not queue (the
// socket's buffer full while the collector was busy) are counted one
// by one from the socket's drop counter (an ENOBUFS says only that
// some were lost), reported in the batch's dropped as ct-overrun, and
// the socket goes on delivering after the overrun. A socket that
// failed and subscribed again counts from its new socket's counter
// (it starts at 0). The events are real: connections created through
// ctnetlink in a namespace of the test's, 600 of them, into a receive
// buffer of a few KiB that nobody reads meanwhile; what was read plus
// what was counted lost must be what was created.
func TestConntrackOverrunCounted(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, conntrack")
	node := polab.NewNode(t)
	var batches []Batch
	c, err := New(Config{Node: "n", NetnsFd: node.Fd, Group: 1, Index: policy.NewRuleIndex(), Model: podModel{},
		Sinks: []func(Batch){func(b Batch) { batches = append(batches, b) }}})
	if err != nil {
		t.Fatal(err)
	}
	ct, err := openConntrack(node.Fd, &c.ctLost, c.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.close)
	c.ct = ct
	small := func() {
		t.Helper()
		if err := unix.SetsockoptInt(ct.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4096); err != nil {
			t.Fatal(err)
		}
	}
	small()
	nl, err := conntrack.Dial(&netlink.Config{NetNS: node.Fd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nl.Close() })
	src, dst := netip.MustParseAddr("10.67.0.1"), netip.MustParseAddr("10.67.0.2")
	create := func(port uint16) {
		t.Helper()
		if err := nl.Create(conntrack.NewFlow(unix.IPPROTO_UDP, 0, src, dst, port, 53, 60, 0)); err != nil {
			t.Fatalf("creating a conntrack entry: %v", err)
		}
	}
	var news int
	count := func(e *ctEvent) {
		if !e.destroy {
			news++
		}
	}
	// overrun creates n entries unread, reads them and checks that
	// what was read and what was counted lost add up to n.
	overrun := func(first uint16, n int) (read int, lost uint64) {
		t.Helper()
		for i := range n {
			create(first + uint16(i))
		}
		news = 0
		before := c.ctLost.Load()
		for ct.fd >= 0 {
			if k, _ := ct.read(count); k == 0 {
				break
			}
		}
		if ct.fd < 0 {
			t.Fatal("the socket was closed after an overrun: it should go on")
		}
		lost = c.ctLost.Load() - before
		if news >= n || lost == 0 {
			t.Fatalf("%d NEW events into a 4 KiB buffer: %d read, %d counted lost: no overrun", n, news, lost)
		}
		if d := int64(n-news) - int64(lost); d > overrunSlack || d < -overrunSlack {
			t.Errorf("%d NEW events, %d read: %d counted lost, want %d (±%d)", n, news, lost, n-news, overrunSlack)
		}
		return news, lost
	}
	read1, lost1 := overrun(20000, 600)

	// After the overrun the socket delivers again.
	news = 0
	create(30000)
	ct.read(count)
	if news != 1 {
		t.Errorf("after the overrun: %d NEW events read, want 1", news)
	}
	c.flush(c.start)
	if len(batches) != 1 || batches[0].Dropped[DropCtEvents] != lost1 {
		t.Errorf("batch dropped %v, want %s: %d", batches[0].Dropped, DropCtEvents, lost1)
	}

	// A failed socket counts one (what it misses until it subscribes
	// again is not known); the new socket's counter starts at 0, and
	// its overrun is counted from it, not from the old one's.
	ct.fail(errors.New("the test closed it"))
	if got := c.ctLost.Load(); got != 1 {
		t.Errorf("a failed socket counted %d lost, want 1", got)
	}
	ct.retryAt = time.Time{}
	if n, _ := ct.read(count); n != 0 || ct.fd < 0 {
		t.Fatalf("subscribing again: socket %d, %d events read", ct.fd, n)
	}
	small()
	read2, lost2 := overrun(31000, 300)
	c.flush(c.start)
	if len(batches) != 2 || batches[1].Dropped[DropCtEvents] != lost2+1 {
		t.Errorf("second batch dropped %v, want %s: %d (the overrun's and the failure's 1)", batches[len(batches)-1].Dropped, DropCtEvents, lost2+1)
	}
	t.Logf("600 NEW events: %d read, %d counted lost; after a new subscription, 300: %d read, %d counted lost", read1, lost1, read2, lost2)
}
