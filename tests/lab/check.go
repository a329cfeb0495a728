package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// Report is the outcome of the lab checks.
type Report struct {
	Pods          int
	Pairs, PairOK int
	// Pairs6 and PairOK6 count IPv6 pairs in a dual-stack lab.
	Pairs6, PairOK6 int
	DualStack       bool
	Failures        []string
}

// OK reports whether every check passed.
func (r *Report) OK() bool {
	return len(r.Failures) == 0 && r.Pairs > 0 && r.Pairs == r.PairOK && (!r.DualStack || (r.Pairs6 > 0 && r.Pairs6 == r.PairOK6))
}

func (r *Report) String() string {
	s := fmt.Sprintf("%d pods, %d/%d pod pairs reachable", r.Pods, r.PairOK, r.Pairs)
	if r.DualStack {
		s += fmt.Sprintf(", %d/%d IPv6 pod pairs reachable", r.PairOK6, r.Pairs6)
	}
	if len(r.Failures) > 0 {
		s += "; " + strings.Join(r.Failures, "; ")
	}
	return s
}

// Check creates podsPerNode pods on every node, prints node status,
// routes and IPAM, and pings every pod from every other pod.
func Check(ctx context.Context, l *Lab, podsPerNode int, out io.Writer) *Report {
	r := &Report{DualStack: l.Topo.DualStack}
	fail := func(f string, a ...any) { r.Failures = append(r.Failures, fmt.Sprintf(f, a...)) }
	for i, n := range l.Topo.Nodes {
		if n.Dedicated {
			continue // a dedicated route reflector runs no pods
		}
		for j := 0; j < podsPerNode; j++ {
			name := fmt.Sprintf("pod%d%d", i+1, j+1)
			p, err := l.AddPod(ctx, n.Name, name)
			if err != nil {
				fail("create %s on %s: %v", name, n.Name, err)
				continue
			}
			if p.IP6 != "" {
				fmt.Fprintf(out, "==> pod %s on %s got %s and %s\n", p.Name, p.Node, p.IP, p.IP6)
			} else {
				fmt.Fprintf(out, "==> pod %s on %s got %s\n", p.Name, p.Node, p.IP)
			}
		}
	}
	pods := l.Pods()
	r.Pods = len(pods)
	section := func(title, text string, err error) {
		fmt.Fprintf(out, "\n==> %s\n%s", title, text)
		if err != nil {
			fmt.Fprintf(out, "(error: %v)\n", err)
		}
	}
	for _, n := range l.Topo.Nodes {
		s, err := l.NodeCtl(ctx, n.Name, "node", "status")
		section("routedctl node status on "+n.Name, s, err)
		if err != nil {
			fail("node status on %s: %v", n.Name, err)
		}
	}
	first := l.Topo.Nodes[len(l.Topo.Nodes)-1].Name
	s, err := l.NodeCtl(ctx, first, "show", "route")
	section("routedctl show route on "+first, s, err)
	s, err = l.NodeRoutes(ctx, first)
	section("kernel routes on "+first, s, err)
	s, err = l.Ctl(ctx, "ipam", "show", "--show-blocks")
	section("routedctl ipam show --show-blocks", s, err)

	// Routes propagate within a second or two of the pods' blocks being
	// claimed; give convergence a bounded wait before judging.
	fmt.Fprintf(out, "\n==> pinging every pod from every other pod (%d pairs)\n", len(pods)*(len(pods)-1))
	deadline := time.Now().Add(20 * time.Second * time.Duration(WaitScale))
	r.Pairs, r.PairOK = pingAll(ctx, l, pods, deadline, func(p Pod) string { return p.IP }, fail)
	fmt.Fprintf(out, "%d/%d pairs reachable\n", r.PairOK, r.Pairs)
	if r.DualStack {
		fmt.Fprintf(out, "\n==> ping -6 from every pod to every other pod (%d pairs)\n", len(pods)*(len(pods)-1))
		r.Pairs6, r.PairOK6 = pingAll(ctx, l, pods, time.Now().Add(20*time.Second*time.Duration(WaitScale)), func(p Pod) string { return p.IP6 }, fail)
		fmt.Fprintf(out, "%d/%d IPv6 pairs reachable\n", r.PairOK6, r.Pairs6)
	}
	return r
}

// pingAll pings addr(to) from every pod to every other, retrying each
// pair every 200 ms until deadline (a pair after the deadline gets one
// probe), and returns the pair count and the reachable ones.
func pingAll(ctx context.Context, l *Lab, pods []Pod, deadline time.Time, addr func(Pod) string, fail func(string, ...any)) (pairs, ok int) {
	for _, from := range pods {
		for _, to := range pods {
			if from.NS == to.NS {
				continue
			}
			pairs++
			err := testenv.Poll(ctx, time.Until(deadline), 200*time.Millisecond, func() (bool, string, error) {
				got, err := l.Ping(ctx, from, addr(to), 1)
				switch {
				case err != nil:
					return false, err.Error(), nil
				case got != 1:
					return false, "no answer", nil
				}
				return true, "", nil
			})
			if err != nil {
				fail("%s (%s) -> %s (%s) unreachable: %v", from.Name, from.Node, to.Name, addr(to), err)
				continue
			}
			ok++
		}
	}
	return pairs, ok
}

// KernelHasIPIP reports whether this kernel can create ipip devices.
func KernelHasIPIP() bool {
	if _, err := os.Stat("/sys/module/ipip"); err == nil {
		return true
	}
	ns := fmt.Sprintf("ipipchk%d", os.Getpid())
	ctx := context.Background()
	if err := ip(ctx, "", "netns", "add", ns); err != nil {
		return false
	}
	defer ip(ctx, "", "netns", "del", ns)
	return ip(ctx, ns, "link", "add", "t0", "type", "ipip") == nil
}
