package flowrec

import (
	"net/netip"
	"os"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestConntrackOverrunCounted: events the kernel could not queue (the
// socket's buffer full while the collector was busy) are counted, an
// overrun at a time (the kernel does not say how many events one
// lost), and reported in the batch's dropped as ct-overrun, and the socket goes on
// delivering after the overrun. The events are real: connections
// created through ctnetlink in a namespace of the test's, 600 of them,
// into a receive buffer of a few KiB that nobody reads meanwhile.
func TestConntrackOverrunCounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, conntrack)")
	}
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
	if err := unix.SetsockoptInt(ct.rv.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4096); err != nil {
		t.Fatal(err)
	}
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
	for i := range 600 {
		create(uint16(20000 + i))
	}
	var news int
	count := func(e *ctEvent) {
		if !e.destroy {
			news++
		}
	}
	ct.read(count)
	if ct.fd < 0 {
		t.Fatal("the socket was closed after an overrun: it should go on")
	}
	lost := c.ctLost.Load()
	if lost == 0 || news >= 600 {
		t.Fatalf("600 NEW events into a 4 KiB buffer: %d read, %d overruns counted", news, lost)
	}
	before := news
	// After the overrun the socket delivers again.
	news = 0
	create(30000)
	ct.read(count)
	if news != 1 {
		t.Errorf("after the overrun: %d NEW events read, want 1", news)
	}
	c.flush(c.start)
	if len(batches) != 1 || batches[0].Dropped[DropCtEvents] != lost {
		t.Errorf("batch dropped %v, want %s: %d", batches[0].Dropped, DropCtEvents, lost)
	}
	t.Logf("%d of 600 NEW events read, %d overruns counted (the kernel does not say how many events an overrun lost)", before, lost)
}
