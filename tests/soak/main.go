// Command soak churns pods on the lab for a while, then checks that
// nothing leaked: IPAM addresses, workload endpoints, host veths and
// routes, and routed's goroutines. Run with `make soak` (not in CI).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/routed-net/routed/tests/lab"
)

func main() {
	bin := flag.String("bin", "bin", "directory with routed's binaries")
	dir := flag.String("dir", "/tmp/routed-soak", "lab state")
	dur := flag.Duration("duration", 5*time.Minute, "how long to churn pods")
	maxPods := flag.Int("pods", 6, "pods alive at most per node")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "make soak needs root (network namespaces)")
		os.Exit(2)
	}
	os.Exit(run(*bin, *dir, *dur, *maxPods))
}

func run(bin, dir string, dur time.Duration, maxPods int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs, _ := filepath.Abs(bin)
	gopath, _ := exec.Command("go", "env", "GOPATH").Output()
	bins := lab.Binaries{
		Routed: filepath.Join(abs, "routed"), Routedctl: filepath.Join(abs, "routedctl"),
		RoutedCNI: filepath.Join(abs, "routed-cni"), RoutedIPAM: filepath.Join(abs, "routed-ipam"),
		Cnitool: filepath.Join(strings.TrimSpace(string(gopath)), "bin", "cnitool"),
	}
	l := lab.New(lab.DefaultTopology("rsoak", 7), bins, dir, func(f string, a ...any) { fmt.Printf("==> "+f+"\n", a...) })
	defer l.Down(context.Background())
	if err := l.Up(ctx); err != nil {
		fmt.Printf("FAIL: lab up: %v\n", err)
		return 1
	}
	before := goroutines(ctx, l)
	fmt.Printf("==> churning pods for %s (at most %d per node); goroutines before: %v\n", dur, maxPods, before)
	live := map[string][]lab.Pod{}
	adds, dels, failures := 0, 0, 0
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		node := l.Topo.Nodes[rand.IntN(len(l.Topo.Nodes))].Name
		if len(live[node]) < maxPods && (len(live[node]) == 0 || rand.IntN(2) == 0) {
			p, err := l.AddPod(ctx, node, fmt.Sprintf("s%d", i))
			if err != nil {
				failures++
				fmt.Printf("add on %s failed: %v\n", node, err)
				continue
			}
			live[node] = append(live[node], p)
			adds++
		} else {
			k := rand.IntN(len(live[node]))
			if err := l.DelPod(ctx, live[node][k]); err != nil {
				failures++
				fmt.Printf("del on %s failed: %v\n", node, err)
			}
			live[node] = append(live[node][:k], live[node][k+1:]...)
			dels++
		}
	}
	fmt.Printf("==> %d adds, %d dels, %d failures; deleting the remaining pods\n", adds, dels, failures)
	for _, ps := range live {
		for _, p := range ps {
			if err := l.DelPod(ctx, p); err != nil {
				failures++
			}
		}
	}
	var problems []string
	if failures > 0 {
		problems = append(problems, fmt.Sprintf("%d CNI operations failed", failures))
	}
	problems = append(problems, leaks(ctx, l)...)
	time.Sleep(5 * time.Second) // let goroutines of finished work exit
	after := goroutines(ctx, l)
	for node, n := range after {
		if b := before[node]; n > b+20 {
			problems = append(problems, fmt.Sprintf("%s: goroutines grew from %d to %d", node, b, n))
		}
	}
	fmt.Printf("==> goroutines after: %v\n", after)
	if len(problems) > 0 {
		fmt.Printf("FAIL:\n  %s\n", strings.Join(problems, "\n  "))
		return 1
	}
	fmt.Println("PASS: no leaked addresses, endpoints, veths, routes or goroutines")
	return 0
}

// leaks lists what is left over once every pod is gone.
func leaks(ctx context.Context, l *lab.Lab) []string {
	var out []string
	if s, err := l.Ctl(ctx, "get", "workloadendpoints"); err != nil || strings.Count(s, "\n") > 1 {
		out = append(out, fmt.Sprintf("workload endpoints left: %v\n%s", err, s))
	}
	if s, err := l.Ctl(ctx, "ipam", "show"); err != nil || !strings.Contains(s, " 0 (0%)") {
		out = append(out, fmt.Sprintf("addresses still allocated: %v\n%s", err, s))
	}
	for _, n := range l.Topo.Nodes {
		links, _ := l.NodeLinks(ctx, n.Name)
		if c := strings.Count(links, "cali"); c > 0 {
			out = append(out, fmt.Sprintf("%s: %d cali veths left", n.Name, c))
		}
		routes, _ := l.NodeRoutes(ctx, n.Name)
		for _, line := range strings.Split(routes, "\n") {
			if strings.Contains(line, " dev cali") {
				out = append(out, fmt.Sprintf("%s: pod route left: %s", n.Name, line))
			}
		}
	}
	return out
}

// goroutines reads go_goroutines from each node's metrics endpoint.
func goroutines(ctx context.Context, l *lab.Lab) map[string]int {
	out := map[string]int{}
	for _, n := range l.Topo.Nodes {
		m, err := l.NodeMetricFamilies(ctx, n.Name)
		if err != nil {
			continue
		}
		if v, ok := m.Sum("go_goroutines", nil); ok {
			out[n.Name] = int(v)
		}
	}
	return out
}
