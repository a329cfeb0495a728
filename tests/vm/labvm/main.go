// Command labvm runs routed's multi-node lab inside the VM that
// tests/vm's TestLabIPIPInVM boots (a Debian kernel with the ipip module,
// which the CI kernel lacks). The lab uses ipipMode CrossSubnet and no
// BGP on the router, so pods on different subnets can only reach each
// other through tunl0. It checks that every pod reaches every other pod,
// that routes to cross-subnet blocks go through tunl0 and same-subnet
// ones straight out of eth0, and that tunl0's packet counters move with
// cross-subnet pings and stay still with same-subnet pings. Then it
// turns WireGuard on over the same pool and off again (wireguard.go).
//
// It prints "ROUTED-LABVM: PASS" or "ROUTED-LABVM: FAIL ..." and exits 0
// or 1. It refuses to run outside the VM (ROUTED_IN_VM=1): it builds
// namespaces and starts daemons.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/tests/lab"
)

const marker = "ROUTED-LABVM:"

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Printf("[%6.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
}

func main() {
	binDir := flag.String("bin", "/opt/routed/bin", "directory holding routed, routedctl, routed-cni, routed-ipam and cnitool")
	dir := flag.String("dir", "/tmp/lab", "lab directory (logs, etcd data, CNI configuration)")
	timeout := flag.Duration("timeout", 6*time.Minute, "give up after this long")
	pings := flag.Int("pings", 5, "echo requests per node pair in the counter checks")
	mode := flag.String("ipip-mode", "CrossSubnet", "the pool's ipipMode; anything but CrossSubnet must fail the checks (a control)")
	waitScale := flag.Int("wait-scale", 1, "multiply the lab's waits by this (tests/vm passes more than 1 under qemu TCG, which runs the guest several times slower)")
	flag.Parse()
	if *waitScale < 1 {
		fmt.Fprintf(os.Stderr, "-wait-scale %d: want 1 or more\n", *waitScale)
		os.Exit(2)
	}
	lab.WaitScale = *waitScale
	if os.Getenv("ROUTED_IN_VM") != "1" {
		fmt.Fprintln(os.Stderr, "labvm runs inside the VM booted by tests/vm (TestLabIPIPInVM), which sets ROUTED_IN_VM=1")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	failures := run(ctx, *binDir, *dir, *mode, *pings)
	if len(failures) > 0 {
		dumpLogs(*dir)
		for _, f := range failures {
			fmt.Println(marker, "FAILURE:", f)
		}
		fmt.Printf("%s FAIL (%d failures, %.1fs)\n", marker, len(failures), time.Since(start).Seconds())
		os.Exit(1)
	}
	fmt.Printf("%s PASS (%.1fs)\n", marker, time.Since(start).Seconds())
}

func run(ctx context.Context, binDir, dir, mode string, pings int) (failures []string) {
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		logf("FAIL: %s", msg)
		failures = append(failures, msg)
	}
	if _, err := os.Stat("/sys/module/ipip"); err != nil {
		fail("the ipip module is not loaded: %v", err)
		return
	}
	topo := lab.DefaultTopology("vm", 0)
	topo.IPIPMode = mode
	topo.NoRouterBGP = true
	topo.NoPolicy = true // the VM's kernel has no nftables
	bins := lab.Binaries{
		Routed:     filepath.Join(binDir, "routed"),
		Routedctl:  filepath.Join(binDir, "routedctl"),
		RoutedCNI:  filepath.Join(binDir, "routed-cni"),
		RoutedIPAM: filepath.Join(binDir, "routed-ipam"),
		Cnitool:    filepath.Join(binDir, "cnitool"),
	}
	l := lab.New(topo, bins, dir, logf)
	// No Down: the VM powers off after this program exits.
	if err := l.Up(ctx); err != nil {
		fail("lab up: %v", err)
		return
	}
	logf("lab is up (ipipMode %s, no BGP on the router, waits x%d)", topo.IPIPMode, lab.WaitScale)

	// (1) Two pods per node, every pod pings every other pod.
	rep := lab.Check(ctx, l, 2, os.Stdout)
	fmt.Println(marker, "check:", rep)
	if !rep.OK() {
		fail("lab check: %s", rep)
		return
	}

	var nodes []lab.NodeSpec // the nodes that run pods
	for _, n := range topo.Nodes {
		if !n.Dedicated {
			nodes = append(nodes, n)
		}
	}
	byNode := map[string][]lab.Pod{}
	for _, p := range l.Pods() {
		byNode[p.Node] = append(byNode[p.Node], p)
	}
	for _, n := range nodes {
		if len(byNode[n.Name]) == 0 {
			fail("no pods on %s", n.Name)
			return
		}
	}

	// (2) Route shapes on every node, for every other node's blocks.
	for _, n := range nodes {
		checkRoutes(ctx, l, n, byNode, fail)
	}
	if out, err := l.NodeRoutes(ctx, nodes[0].Name); err == nil {
		logf("kernel routes on %s:\n%s", nodes[0].Name, out)
	}

	// (3) tunl0 counters: still during same-subnet pings, moving during
	// cross-subnet pings.
	var same, cross [][2]lab.NodeSpec
	for _, a := range nodes {
		for _, b := range nodes {
			switch {
			case a.Name == b.Name:
			case a.Subnet == b.Subnet:
				same = append(same, [2]lab.NodeSpec{a, b})
			default:
				cross = append(cross, [2]lab.NodeSpec{a, b})
			}
		}
	}
	pr := &prober{ctx: ctx, l: l, nodes: nodes, byNode: byNode, pings: pings, fail: fail}
	phase := func(name string, pairs [][2]lab.NodeSpec) (map[string][2]int64, map[string]int64, bool) {
		delta, expect, ok := pr.measure(name, pairs, nil, "tunl0")
		return delta["tunl0"], expect, ok
	}
	if delta, _, ok := phase("same-subnet", same); ok {
		for _, n := range nodes {
			if d := delta[n.Name]; d[0] != 0 || d[1] != 0 {
				fail("same-subnet pings moved %s's tunl0 counters: rx +%d tx +%d, want +0 +0", n.Name, d[0], d[1])
			}
		}
	}
	if delta, expect, ok := phase("cross-subnet", cross); ok {
		for _, n := range nodes {
			d, want := delta[n.Name], expect[n.Name]
			if d[0] < want || d[1] < want {
				fail("cross-subnet pings: %s's tunl0 rx +%d tx +%d, want at least +%d each", n.Name, d[0], d[1], want)
			}
		}
	}
	// (4) WireGuard on the same IPIP pool, turned on and off by
	// FelixConfiguration (wireguard.go); only once IPIP is proven.
	if len(failures) == 0 {
		wireguardPhase(pr, cross)
	}
	if out, err := l.NodeRoutes(ctx, nodes[0].Name); err == nil && len(failures) > 0 {
		logf("kernel routes on %s at the end:\n%s", nodes[0].Name, out)
	}
	return failures
}

// prober sends a fixed number of pings between the first pods of node
// pairs and reads devices' packet counters on every node around them.
type prober struct {
	ctx    context.Context
	l      *lab.Lab
	nodes  []lab.NodeSpec
	byNode map[string][]lab.Pod
	pings  int
	fail   func(string, ...any)
}

// measure pings across pairs (pings each, from the first pod of the
// first node to the first pod of the second) and, when tcp is not nil,
// runs it too; it returns every device's counter change per node (rx,
// tx packets) and the packets each node's tunnel must carry at least
// each way if the pings are tunnelled through it: each echo crosses the
// sender's and the receiver's tunnel once each way. ok is false when a
// ping lost a reply or a counter could not be read (fail said why).
func (p *prober) measure(name string, pairs [][2]lab.NodeSpec, tcp func() error, devs ...string) (delta map[string]map[string][2]int64, expect map[string]int64, ok bool) {
	before := map[string]map[string][2]uint64{}
	for _, dev := range devs {
		c, err := counters(p.nodes, dev)
		if err != nil {
			p.fail("%s: reading %s counters: %v", name, dev, err)
			return nil, nil, false
		}
		before[dev] = c
	}
	expect = map[string]int64{}
	ok = true
	for _, pr := range pairs {
		from, to := p.byNode[pr[0].Name][0], p.byNode[pr[1].Name][0]
		got, err := p.l.Ping(p.ctx, from, to.IP, p.pings)
		if err != nil || got != p.pings {
			p.fail("%s: %s (%s) -> %s (%s): %d/%d replies (%v)", name, from.Name, from.Node, to.Name, to.IP, got, p.pings, err)
			ok = false
		}
		expect[pr[0].Name] += int64(got)
		expect[pr[1].Name] += int64(got)
	}
	if tcp != nil {
		if err := tcp(); err != nil {
			p.fail("%s: %v", name, err)
			ok = false
		}
	}
	delta = map[string]map[string][2]int64{}
	for _, dev := range devs {
		after, err := counters(p.nodes, dev)
		if err != nil {
			p.fail("%s: reading %s counters: %v", name, dev, err)
			return nil, nil, false
		}
		delta[dev] = map[string][2]int64{}
		for _, n := range p.nodes {
			b, a := before[dev][n.Name], after[n.Name]
			d := [2]int64{int64(a[0] - b[0]), int64(a[1] - b[1])}
			delta[dev][n.Name] = d
			fmt.Printf("%s %s pings (%d pairs x %d): %s %s rx +%d tx +%d packets (rx %d->%d, tx %d->%d)\n",
				marker, name, len(pairs), p.pings, n.Name, dev, d[0], d[1], b[0], a[0], b[1], a[1])
		}
	}
	return delta, expect, ok
}

// checkRoutes checks n's routes to every other node's pod blocks: via
// tunl0 onlink across subnets, via eth0 on the same subnet, proto 82.
func checkRoutes(ctx context.Context, l *lab.Lab, n lab.NodeSpec, byNode map[string][]lab.Pod, fail func(string, ...any)) {
	type want struct {
		block netip.Prefix
		peer  lab.NodeSpec
	}
	var wants []want
	seen := map[netip.Prefix]bool{}
	for _, m := range l.Topo.Nodes {
		if m.Name == n.Name {
			continue
		}
		for _, p := range byNode[m.Name] {
			b := netip.PrefixFrom(netip.MustParseAddr(p.IP), 26).Masked()
			if !seen[b] {
				seen[b] = true
				wants = append(wants, want{b, m})
			}
		}
	}
	sort.Slice(wants, func(i, j int) bool { return wants[i].block.Addr().Less(wants[j].block.Addr()) })
	// The pods already answer pings, so the routes are in; still allow
	// a little time for late updates.
	deadline := time.Now().Add(15 * time.Second * time.Duration(lab.WaitScale))
	for {
		routes, err := l.NodeRoutes(ctx, n.Name)
		var bad []string
		var good []string
		if err != nil {
			bad = append(bad, err.Error())
		}
		for _, w := range wants {
			line := routeLine(routes, w.block)
			gw := w.peer.Addr.Addr().String()
			var parts []string
			kind := "same-subnet"
			if w.peer.Subnet == n.Subnet {
				parts = []string{"via " + gw + " dev eth0 ", "proto 82"}
			} else {
				kind = "cross-subnet"
				parts = []string{"via " + gw + " dev tunl0 ", "proto 82", "onlink"}
			}
			ok := line != ""
			for _, p := range parts {
				ok = ok && strings.Contains(line+" ", p)
			}
			if w.peer.Subnet == n.Subnet && strings.Contains(line, "tunl0") {
				ok = false
			}
			if ok {
				good = append(good, fmt.Sprintf("%s %s route on %s (block of %s): %s", marker, kind, n.Name, w.peer.Name, line))
			} else {
				bad = append(bad, fmt.Sprintf("%s: %s route to %s's block %s is %q, want %q", n.Name, kind, w.peer.Name, w.block, line, strings.Join(parts, "... ")))
			}
		}
		if len(bad) == 0 {
			for _, g := range good {
				fmt.Println(g)
			}
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, b := range bad {
				fail("%s", b)
			}
			logf("kernel routes on %s:\n%s", n.Name, routes)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// routeLine is the `ip route` line for exactly block, or "".
func routeLine(routes string, block netip.Prefix) string {
	for _, line := range strings.Split(routes, "\n") {
		if strings.HasPrefix(line, block.String()+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// counters reads a device's RX and TX packet counters in every node's
// namespace over netlink.
func counters(nodes []lab.NodeSpec, dev string) (map[string][2]uint64, error) {
	out := map[string][2]uint64{}
	for _, n := range nodes {
		rx, tx, err := devPackets(n.Name, dev)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		out[n.Name] = [2]uint64{rx, tx}
	}
	return out, nil
}

func devPackets(ns, dev string) (rx, tx uint64, err error) {
	link, err := nsLink(ns, dev)
	if err != nil {
		return 0, 0, err
	}
	st := link.Attrs().Statistics
	if st == nil {
		return 0, 0, fmt.Errorf("%s has no statistics", dev)
	}
	return st.RxPackets, st.TxPackets, nil
}

// nsLink reads a link in a named namespace (a node's or a pod's).
func nsLink(ns, dev string) (netlink.Link, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	// Only rtnetlink: the guest kernel has no xfrm netlink family.
	nh, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	link, err := nh.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", dev, ns, err)
	}
	return link, nil
}

// dumpLogs prints the tail of every log the lab wrote.
func dumpLogs(dir string) {
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || !strings.HasSuffix(p, ".log") {
			return nil
		}
		b, _ := os.ReadFile(p)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		fmt.Printf("---- %s (tail)\n%s\n", p, b)
		return nil
	})
}
