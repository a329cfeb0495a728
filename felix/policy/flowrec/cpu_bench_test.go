package flowrec_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testenv"
)

// trafficConfig is what the traffic process (this test binary run
// again, FLOWREC_TRAFFIC naming the file) needs: a server namespace
// and address, a client namespace, how many connections and from how
// many clients at once.
type trafficConfig struct {
	ServerNetns, ClientNetns string
	Addr                     string
	Conns, Workers           int
	// NodeNetns is flushed of its conntrack entries a second after
	// the traffic: the kernel destroys them (a DESTROY event each,
	// with its counters, as when they expire) at once, not when its
	// sweep, shared by every namespace of the machine, comes by (up to
	// a minute).
	NodeNetns string
}

// runTraffic is the traffic process: a server that writes a byte and
// closes (as the e2e connection benchmark's), and clients that each
// connect, read the byte and the close, until Conns connections were
// made. It prints the connections a second.
func runTraffic(path string) error {
	var cfg trafficConfig
	if err := readJSON(path, &cfg); err != nil {
		return err
	}
	inNetns := func(path string, fn func() error) error {
		h, err := netns.GetFromPath(path)
		if err != nil {
			return err
		}
		defer h.Close()
		// The thread stays in the namespace: it is never unlocked,
		// so it ends with its goroutine.
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			return err
		}
		return fn()
	}
	lnc := make(chan net.Listener, 1)
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- inNetns(cfg.ServerNetns, func() error {
			ln, err := net.Listen("tcp", cfg.Addr)
			if err != nil {
				return err
			}
			lnc <- ln
			for {
				c, err := ln.Accept()
				if err != nil {
					return nil
				}
				_, _ = c.Write([]byte{1})
				c.Close()
			}
		})
	}()
	var ln net.Listener
	select {
	case ln = <-lnc:
	case err := <-srvErr:
		return fmt.Errorf("server: %w", err)
	}
	defer ln.Close()
	var left atomic.Int64
	left.Store(int64(cfg.Conns))
	start := time.Now()
	errc := make(chan error, cfg.Workers)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			errc <- inNetns(cfg.ClientNetns, func() error {
				buf := make([]byte, 8)
				for left.Add(-1) >= 0 {
					c, err := net.DialTimeout("tcp", cfg.Addr, 3*time.Second)
					if err != nil {
						return err
					}
					for {
						if _, err := c.Read(buf); err != nil {
							break
						}
					}
					c.Close()
				}
				return nil
			})
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errc)
	for err := range errc {
		if err != nil {
			return err
		}
	}
	fmt.Printf("conns/s %.0f\n", float64(cfg.Conns)/took.Seconds())
	time.Sleep(time.Second)
	f, err := os.Open(cfg.NodeNetns)
	if err != nil {
		return err
	}
	defer f.Close()
	ct, err := conntrack.Dial(&netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return fmt.Errorf("conntrack socket: %w", err)
	}
	defer ct.Close()
	if err := ct.Flush(); err != nil {
		return fmt.Errorf("flushing conntrack: %w", err)
	}
	return nil
}

// envPositive is the positive number in the environment variable name,
// def when it is unset.
func envPositive(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// cpuTime is this process's user and system CPU.
func cpuTime(tb testing.TB) time.Duration {
	u, s := cpuTimes(tb)
	return u + s
}

// cpuTimes is this process's user CPU and system CPU (the kernel's
// work on its behalf: receiving events, scheduling its threads).
func cpuTimes(tb testing.TB) (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkCollectorCPU measures the collector's CPU per connection on
// real conntrack events and flow marks: the flow lab's node (its
// policy programmed with flow marks, the collector reading them and
// conntrack's NEW and DESTROY of the node's namespace), and a separate
// process (so that its CPU is not counted) making FLOWREC_BENCH_CONNS
// TCP connections (10,000 by default) from pod a to pod c, 4 at a
// time, each to a server that writes a byte and closes, as the e2e
// connection benchmark does, then flushing the node's conntrack table
// (each connection's DESTROY, as when its entry expires). The figure is this process's CPU (the
// collector's: nothing else here runs meanwhile) from the first
// connection until the collector counted every connection started and
// ended, less its CPU at rest over as long (measured before), divided
// by the connections: µs-cpu/conn. "staged" adds the
// lab's staged policy, evaluated for each new connection.
//
// Every connection must be counted as started and ended, nothing
// dropped: a figure of a collector that missed connections would
// measure less work.
func BenchmarkCollectorCPU(b *testing.B) {
	conns := envPositive(b, "FLOWREC_BENCH_CONNS", 10_000)
	for _, staged := range []bool{false, true} {
		b.Run(fmt.Sprintf("staged=%v", staged), func(b *testing.B) {
			benchCollectorCPU(b, conns, staged)
		})
	}
}

func benchCollectorCPU(b *testing.B, conns int, staged bool) {
	l := newFlowLabBare(b)
	if !staged {
		l.model.SetStaged(nil)
	}
	a, c := l.pods["a"], l.pods["c"]
	const port = 7100
	var mu sync.Mutex
	var started, ended, dropped uint64
	col, err := flowrec.New(flowrec.Config{Node: "node", NetnsFd: l.node.Fd, Group: 8, Index: l.m.Index(), Model: l.model,
		Interval: 200 * time.Millisecond, Sinks: []func(flowrec.Batch){func(bt flowrec.Batch) {
			mu.Lock()
			defer mu.Unlock()
			dropped += bt.DroppedTotal()
			for _, f := range bt.Flows {
				if f.Src.Addr == a.IPv4.String() && f.Dst.Addr == c.IPv4.String() && f.DstPort == port {
					started += f.Started
					ended += f.Ended
				}
			}
		}}})
	if err != nil {
		b.Fatal(err)
	}
	runCollector(b, col)
	cfg := trafficConfig{ServerNetns: c.Path(), ClientNetns: a.Path(), Addr: net.JoinHostPort(c.IPv4.String(), strconv.Itoa(port)), Conns: conns, Workers: 4, NodeNetns: l.node.Path()}
	js, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(b.TempDir(), "traffic.json")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		b.Fatal(err)
	}
	// The collector's CPU at rest (its ticks), measured over 3 s after
	// the lab's setup was collected (its garbage would otherwise be
	// marked and swept in the window), is taken out of the figure.
	runtime.GC()
	i0, c0 := time.Now(), cpuTime(b)
	time.Sleep(3 * time.Second)
	idle := float64(cpuTime(b)-c0) / float64(time.Since(i0))
	var cpu, sys, took time.Duration
	b.ResetTimer()
	for i := range b.N {
		mu.Lock()
		started, ended, dropped = 0, 0, 0
		mu.Unlock()
		t0 := time.Now()
		u0, s0 := cpuTimes(b)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "FLOWREC_TRAFFIC="+cfgPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("traffic process: %v: %s", err, out)
		}
		if i == 0 {
			b.Logf("traffic: %s", out)
		}
		// Every connection counted, started and ended (the traffic
		// process flushed their conntrack entries).
		testenv.Eventually(b, 60*time.Second, 20*time.Millisecond, func() string {
			mu.Lock()
			s, e, d := started, ended, dropped
			mu.Unlock()
			if d != 0 {
				b.Fatalf("the collector dropped %d records", d)
			}
			if s < uint64(conns) || e < uint64(conns) {
				return fmt.Sprintf("%d connections: the collector counted %d started, %d ended", conns, s, e)
			}
			if s != uint64(conns) || e != uint64(conns) {
				b.Fatalf("%d connections: %d started, %d ended", conns, s, e)
			}
			return ""
		})
		u1, s1 := cpuTimes(b)
		cpu += u1 + s1 - u0 - s0
		sys += s1 - s0
		took += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N * conns)
	net := float64(cpu) - idle*float64(took)
	b.ReportMetric(net/1e3/n, "µs-cpu/conn")
	b.ReportMetric(float64(cpu.Microseconds())/n, "µs-cpu-with-idle/conn")
	b.ReportMetric(float64(sys.Microseconds())/n, "µs-sys-with-idle/conn")
	b.ReportMetric(idle*1e3, "idle-millicores")
	b.ReportMetric(took.Seconds()/float64(b.N), "s/run")
}
