package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// Sizes of the policy benchmark: policies selecting the destination,
// members of each one's source set.
const (
	benchPolicies   = 200
	benchSetMembers = 1000
)

// benchPolicyYAML is benchPolicies GlobalNetworkPolicies selecting every
// pod at ingress, each allowing TCP from its own GlobalNetworkSet of
// benchSetMembers addresses (none of them the client), and one last
// policy that allows the client: a new connection is looked up in every
// set before it is allowed. With sets false it is only the policies.
func benchPolicyYAML(client string, sets bool) string {
	var b strings.Builder
	for i := range benchPolicies {
		if sets {
			fmt.Fprintf(&b, "---\napiVersion: routed.io/v1\nkind: GlobalNetworkSet\nmetadata: {name: bench-s%d, labels: {bench-set: s%d}}\nspec:\n  nets:\n", i, i)
			for j := range benchSetMembers {
				n := i*benchSetMembers + j
				fmt.Fprintf(&b, "  - 100.%d.%d.%d/32\n", 64+n>>16, (n>>8)&0xff, n&0xff)
			}
		}
		fmt.Fprintf(&b, "---\napiVersion: routed.io/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: bench-p%03d}\nspec:\n  order: %d\n  selector: all()\n  types: [Ingress]\n  ingress: [{action: Allow, protocol: TCP, source: {selector: \"bench-set == 's%d'\"}}]\n", i, i, i)
	}
	fmt.Fprintf(&b, "---\napiVersion: routed.io/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: bench-pzzz}\nspec:\n  order: 1000\n  selector: all()\n  types: [Ingress]\n  ingress: [{action: Allow, source: {nets: [%s/32]}}]\n", client)
	return b.String()
}

// BenchmarkPolicyDataplane measures, in one lab and one run, what 200
// policies selecting the destination pod (each with a source set of
// 1,000 addresses) cost against no policy at all: iperf3 throughput pod
// to pod across two nodes (one TCP stream), new TCP connections a second
// (a Go client and server in the pods' namespaces; every connection's
// first packet walks all 200 policy chains), and the CNI ADD latency of
// new pods on the node (the plugin waits until felix programmed them).
// Phases alternate off, on, off, on so drift hits both alike; ratios
// are on/off.
func BenchmarkPolicyDataplane(b *testing.B) {
	l := startLab(b)
	ctx := context.Background()
	n1, n3 := l.Topo.Nodes[0], l.Topo.Nodes[2]
	src, err := l.AddPod(ctx, n1.Name, "psrc")
	if err != nil {
		b.Fatal(err)
	}
	dst, err := l.AddPod(ctx, n3.Name, "pdst")
	if err != nil {
		b.Fatal(err)
	}
	reachB(b, l, src, dst.IP)
	srv := startConnServer(b, dst)
	// The sets stay in the datastore throughout: felix programs a set
	// only while a policy uses it, so "off" has none in the kernel.
	if err := l.ApplyYAML(ctx, "bench-sets.yaml", benchPolicyYAML(src.IP, true)); err != nil {
		b.Fatal(err)
	}
	policies := filepath.Join(l.Dir, "bench-policies.yaml")
	if err := l.ApplyYAML(ctx, "bench-policies.yaml", benchPolicyYAML(src.IP, false)); err != nil {
		b.Fatal(err)
	}
	set := func(on bool) time.Duration {
		start := time.Now()
		if on {
			if err := l.ApplyYAML(ctx, "bench-policies.yaml", benchPolicyYAML(src.IP, false)); err != nil {
				b.Fatal(err)
			}
		} else if out, err := l.Ctl(ctx, "delete", "-f", policies); err != nil {
			b.Fatalf("delete policies: %v: %s", err, out)
		}
		// Programmed when the last policy's rule counter is there (or
		// gone) on the destination's node.
		testenv.Eventually(b, 120*time.Second, 250*time.Millisecond, func() string {
			out, err := l.NodeCtl(ctx, n3.Name, "policy", "counters", "pi-gnp:bench-pzzz/0")
			if err != nil {
				return fmt.Sprintf("policy counters: %v", err)
			}
			if strings.Contains(out, "pi-gnp:bench-pzzz/0") != on {
				return fmt.Sprintf("policies on=%v not yet programmed on %s", on, n3.Name)
			}
			return ""
		})
		reachB(b, l, src, dst.IP)
		return time.Since(start)
	}

	const iperfSeconds, connSeconds, adds = 5, 5, 15
	var tput, conns [2][]float64
	var addLat [2][]time.Duration
	var program []time.Duration
	b.ResetTimer()
	for range b.N {
		for round := range 2 {
			for _, on := range []bool{false, true} {
				took := set(on)
				if on {
					program = append(program, took)
				}
				k := 0
				if on {
					k = 1
				}
				bps, err := l.Throughput(ctx, src, dst, iperfSeconds)
				if err != nil {
					b.Fatal(err)
				}
				tput[k] = append(tput[k], bps)
				conns[k] = append(conns[k], connRate(b, src, srv, connSeconds))
				for i := range adds {
					t0 := time.Now()
					p, err := l.AddPod(ctx, n3.Name, fmt.Sprintf("pa%d%d%d", round, k, i))
					if err != nil {
						b.Fatal(err)
					}
					addLat[k] = append(addLat[k], time.Since(t0))
					if err := l.DelPod(ctx, p); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	b.StopTimer()
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	p50 := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[(len(s)-1)/2].Microseconds()) / 1000
	}
	b.ReportMetric(mean(tput[0])/1e6, "iperf-off-Mbit/s")
	b.ReportMetric(mean(tput[1])/1e6, "iperf-on-Mbit/s")
	b.ReportMetric(mean(tput[1])/mean(tput[0]), "iperf-on/off")
	b.ReportMetric(mean(conns[0]), "conn/s-off")
	b.ReportMetric(mean(conns[1]), "conn/s-on")
	b.ReportMetric(mean(conns[1])/mean(conns[0]), "conn/s-on/off")
	b.ReportMetric(p50(addLat[0]), "add-p50-off-ms")
	b.ReportMetric(p50(addLat[1]), "add-p50-on-ms")
	b.ReportMetric(p50(addLat[1])/p50(addLat[0]), "add-p50-on/off")
	b.Logf("%d policies x %d-address sets: iperf3 off %v on %v Mbit/s; conn/s off %v on %v; ADD off %v on %v; policies programmed in %v",
		benchPolicies, benchSetMembers, mbit(tput[0]), mbit(tput[1]), conns[0], conns[1], addLat[0], addLat[1], program)
}

func mbit(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x / 1e6)
	}
	return out
}

func reachB(b *testing.B, l *lab.Lab, from lab.Pod, to string) {
	b.Helper()
	testenv.Eventually(b, 30*time.Second, 250*time.Millisecond, func() string {
		if got, err := l.Ping(context.Background(), from, to, 1); err != nil || got != 1 {
			return fmt.Sprintf("%s cannot reach %s (%v)", from.Name, to, err)
		}
		return ""
	})
}

// inNetns runs fn on a thread in the named namespace: sockets it
// creates live there.
func inNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		return err
	}
	defer netns.Set(orig)
	return fn()
}

// startConnServer listens on port 7100 in the pod's namespace; each
// connection gets one byte and is closed by the server (so the client,
// which makes the connections, keeps no TIME_WAIT).
func startConnServer(b *testing.B, p lab.Pod) string {
	b.Helper()
	var ln net.Listener
	if err := inNetns(p.NS, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(p.IP, "7100"))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte{1})
			c.Close()
		}
	})
	return ln.Addr().String()
}

// connRate opens connections from the pod to addr for the given time
// with 4 clients, each connecting, reading the server's byte and its
// close, and returns connections a second.
func connRate(b *testing.B, from lab.Pod, addr string, seconds int) float64 {
	b.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	deadline := start.Add(time.Duration(seconds) * time.Second)
	for range 4 {
		wg.Go(func() {
			errs <- inNetns(from.NS, func() error {
				buf := make([]byte, 8)
				for time.Now().Before(deadline) {
					c, err := net.DialTimeout("tcp", addr, 3*time.Second)
					if err != nil {
						return err
					}
					_, err = io.ReadFull(c, buf[:1])
					c.Close()
					if err != nil {
						return err
					}
					n.Add(1)
				}
				return nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatalf("connections %s -> %s: %v", from.Name, addr, err)
		}
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}
