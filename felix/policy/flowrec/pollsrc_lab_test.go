package flowrec_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	l.closeTimeouts(pollCloseTimeout)
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
	t.Logf("%d events alike:\n%s", len(got), strings.Join(got, "\n"))
	// The rules as nft shows them, where it is installed (the VM tier
	// has the kernel's modules but no nft).
	if _, err := exec.LookPath("nft"); err == nil {
		out, err := exec.Command("nsenter", "--net="+l.node.Path(), "nft", "list", "table", "inet", flowrec.GenTable).CombinedOutput()
		if err != nil {
			t.Fatalf("the generation rules: %v: %s", err, out)
		}
		t.Logf("%s", out)
	}
}

// TestPollSourceAccountsEveryConnection: 20,000 short connections
// through the flow lab's node from four clients at once (the traffic
// process of BenchmarkCollectorCPU: the server closes first, so the
// clients take their ports again within a second or two, and a new
// connection on the tuple of one in TIME_WAIT makes the kernel delete
// the old entry at once). The poll source reads most of them; those
// whose entries went before a poll read them are counted from the
// kernel's own count of new entries (ct-unread). Recorded and counted
// must add up to the connections made, exactly, and every recorded
// connection must end.
func TestPollSourceAccountsEveryConnection(t *testing.T) {
	l := newFlowLabBare(t)
	l.closeTimeouts(pollCloseTimeout)
	a, c := l.pods["a"], l.pods["c"]
	const conns = 20000
	// NodeNetns is where the traffic process flushes conntrack after
	// it: pod b's, which holds nothing, so the node's entries stay as
	// the kernel leaves them.
	cfg := trafficConfig{ServerNetns: c.Path(), ClientNetns: a.Path(), Addr: net.JoinHostPort(c.IPv4.String(), "7101"),
		Conns: conns, Workers: 4, NodeNetns: l.pods["b"].Path()}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "traffic.json")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started, ended uint64
	dropped := map[string]uint64{}
	col, err := flowrec.New(flowrec.Config{Node: "node", NetnsFd: l.node.Fd, Group: 8, Index: l.m.Index(), Model: l.model,
		Source: flowrec.SourcePoll, Interval: time.Second, MaxPending: 1 << 17,
		Sinks: []func(flowrec.Batch){func(b flowrec.Batch) {
			mu.Lock()
			defer mu.Unlock()
			for _, f := range b.Flows {
				if f.DstPort == 7101 {
					started += f.Started
					ended += f.Ended
				}
			}
			for k, v := range b.Dropped {
				dropped[k] += v
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	runCollector(t, col)
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		if col.Source() != flowrec.SourcePoll {
			return "the collector has not opened its source"
		}
		return ""
	})
	rate := trafficRate(t, cfgPath)
	testenv.Eventually(t, 30*time.Second, 250*time.Millisecond, func() string {
		mu.Lock()
		defer mu.Unlock()
		if started+dropped[flowrec.DropCtUnread] != conns || ended != started {
			return fmt.Sprintf("%d connections made: %d recorded, %d ended, %d counted unread; dropped %v", conns, started, ended, dropped[flowrec.DropCtUnread], dropped)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for k, v := range dropped {
		if k != flowrec.DropCtUnread && v > 0 {
			t.Errorf("dropped for another reason: %v", dropped)
		}
	}
	t.Logf("%.0f connections a second: %d recorded, %d counted unread", rate, started, dropped[flowrec.DropCtUnread])
}

// TestPollSourceRestart: a poll source stopped and another started in
// its place (routed restarted): the connection the first reported is
// not reported again as new; one begun while neither ran (the rules
// stay and give it the last generation) is; both end, once each, when
// they leave the table.
func TestPollSourceRestart(t *testing.T) {
	l := newFlowLabBare(t)
	l.closeTimeouts(pollCloseTimeout)
	first, closeFirst, _, err := flowrec.OpenSource("poll", l.node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	l.probe("a", "c", "udp", 5353, false, true)
	var got []string
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		got = append(got, describe(first())...)
		if len(got) != 1 || !strings.HasPrefix(got[0], "NEW 17 ") || !strings.Contains(got[0], ":5353 ") {
			return fmt.Sprintf("the first source reported %q, want the udp/5353 NEW alone", got)
		}
		return ""
	})
	closeFirst()
	l.probe("a", "c", "udp", 9090, false, true)
	second, closeSecond, _, err := flowrec.OpenSource("poll", l.node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSecond)
	h, err := netlink.NewHandleAt(netns.NsHandle(l.node.Fd), unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var after []string
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		after = append(after, describe(second())...)
		if len(after) != 1 || !strings.HasPrefix(after[0], "NEW 17 ") || !strings.Contains(after[0], ":9090 ") {
			return fmt.Sprintf("the restarted source reported %q, want the udp/9090 NEW alone", after)
		}
		return ""
	})
	// Flushed, both leave the table: the next sweep ends them.
	if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
		after = append(after, describe(second())...)
		var ends []string
		for _, e := range after {
			if strings.HasPrefix(e, "DESTROY 17 ") {
				ends = append(ends, e)
			}
		}
		if len(after) != 3 || len(ends) != 2 {
			return fmt.Sprintf("after the flush the restarted source reported %q, want a DESTROY of each", after)
		}
		return ""
	})
}
