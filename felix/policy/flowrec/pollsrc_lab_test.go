package flowrec_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testenv"
)

// TestPollSourceMatchesEvents: the poll source (the conntrack table read
// by generations in the conntrack mark) reports what ctnetlink's events
// report, read side by side in the flow lab's node: the same NEW and
// DESTROY for TCP (ended by its close, read finished in TIME_WAIT),
// UDP and ICMP (ended by a flush: gone from the table, found by a
// sweep) over IPv4 and IPv6, with the same counters on each DESTROY.
func TestPollSourceMatchesEvents(t *testing.T) {
	l := newFlowLabBare(t)
	poll, closePoll, _, err := flowrec.OpenSource("poll", l.node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closePoll)
	events, closeEvents, _, err := flowrec.OpenSource("events", l.node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeEvents)
	for _, v6 := range []bool{false, true} {
		l.probe("a", "c", "tcp", 8080, v6, true)
		l.probe("a", "c", "udp", 5353, v6, true)
		l.probe("a", "c", "icmp", 0, v6, true)
	}
	var got, want []string
	read := func() {
		got = append(got, describe(poll())...)
		want = append(want, describe(events())...)
		slices.Sort(got)
		slices.Sort(want)
	}
	// The TCP connections end by their close: read in TIME_WAIT
	// within a poll or two, before anything is flushed.
	testenv.Eventually(t, 15*time.Second, 200*time.Millisecond, func() string {
		read()
		n := 0
		for _, e := range got {
			if strings.HasPrefix(e, "DESTROY 6 ") {
				n++
			}
		}
		if n < 2 {
			return fmt.Sprintf("the poll source reported %d TCP ends, want 2:\n%s", n, strings.Join(got, "\n"))
		}
		return ""
	})
	h, err := netlink.NewHandleAt(netns.NsHandle(l.node.Fd), unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// UDP and ICMP entries end by timeout (30 s): flushed, they leave
	// the table at once (ctnetlink reports a DESTROY for each; the
	// poll source's next sweep misses them).
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
		if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			return fmt.Sprintf("flushing conntrack: %v", err)
		}
		read()
		if len(want) < 12 || !slices.Equal(got, want) {
			return fmt.Sprintf("poll source:\n%s\nctnetlink's events:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return ""
	})
	for _, e := range got {
		if strings.HasPrefix(e, "DESTROY") && strings.Contains(e, " 0/0 0/0") {
			t.Errorf("a DESTROY without counters: %s", e)
		}
	}
	out, err := exec.Command("nsenter", "--net="+l.node.Path(), "nft", "list", "table", "inet", flowrec.GenTable).CombinedOutput()
	if err != nil {
		t.Fatalf("the generation rules: %v: %s", err, out)
	}
	t.Logf("%d events alike:\n%s\n%s", len(got), strings.Join(got, "\n"), out)
}
