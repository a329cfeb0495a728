package flowrec_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/flowrec"
)

// BenchmarkEventSources: what the kernel's sources of flow records cost
// the traffic, apart from any collector. The flow lab's connections
// a -> c (20,000 a column, 4 clients) with, in turn (FLOWREC_SOURCES,
// default all):
//
//   - none: nobody listening;
//   - ct: a socket on conntrack's NEW and DESTROY groups, read one
//     message a system call as the events come (a wakeup each);
//   - ctbatch: the same socket drained every 50 ms, as the collector
//     does (its batch wait);
//   - cttimed: ctbatch with ctnetlink_conntrack_event timed in the
//     kernel (fnClock; where fexit is allowed);
//   - bpf: the probes (bpfsrc.go: fexit programs on conntrack's
//     confirm and delete, a ring buffer) drained every 50 ms, with
//     their programs' run time (where fexit is allowed);
//   - ctmask: ctbatch with `ct event set new,destroy` before conntrack
//     (the kernel caches no other event kinds for the connections);
//   - destroy: DESTROY alone (no connection is visible before its entry
//     goes: 120 s after a TCP close);
//   - nflog: DESTROY, and each connection's first packet copied to an
//     nflog group by a `ct state new log` rule, batched 32 a message
//     (as the flow marks are): NEW taken from a batched source;
//   - dump: nobody listening; the conntrack table dumped every 2 s
//     (FLOWREC_DUMP_EVERY), as a collector polling the table would: a
//     closed TCP connection stays 120 s in TIME_WAIT, so a poll finds
//     every connection without the kernel building an event for it,
//     and reads each entry once a poll while it stays;
//   - pollgen: nobody listening; generations in the conntrack mark: a
//     rule gives each new entry the current start generation (mark
//     bits 0-3), others give an entry's packets from its first FIN or
//     RST on the current end generation (bits 4-7); every second the
//     generations move on (the rules replaced in one transaction) and
//     the table is dumped twice, filtered by the kernel to the start
//     and the end generation just closed: each connection is read
//     about twice (its start, its end), whatever the table holds;
//   - genrules: pollgen's rules alone, the generations never moving
//     and nothing read (what the rules cost each packet);
//   - poll: the poll source itself (pollsrc.go: its rules after the
//     policy, one generation field, counters, one dump a poll and a
//     sweep every 5 s), read every 50 ms as the collector's loop would.
//
// Three rounds (FLOWREC_ROUNDS), the sources alternated; the last lines
// give each source's connections a second against none's of the same
// rounds. The messages and packets each column received are printed: a
// source that received nothing would measure nothing.
func BenchmarkEventSources(b *testing.B) {
	sources := strings.FieldsFunc(os.Getenv("FLOWREC_SOURCES"), func(r rune) bool { return r == ' ' || r == ',' })
	if len(sources) == 0 {
		sources = []string{"none", "ct", "ctbatch", "ctmask", "destroy", "nflog"}
	}
	rounds := envPositive(b, "FLOWREC_ROUNDS", 3)
	l := newFlowLabBare(b)
	a, c := l.pods["a"], l.pods["c"]
	cfg := trafficConfig{ServerNetns: c.Path(), ClientNetns: a.Path(), Addr: net.JoinHostPort(c.IPv4.String(), "7100"), Conns: 20000, Workers: 4, NodeNetns: l.node.Path()}
	js, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(b.TempDir(), "traffic.json")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		b.Fatal(err)
	}
	rates := map[string][]float64{}
	for range b.N {
		for round := range rounds {
			for _, src := range sources {
				got, stop := startSource(b, l.node.Fd, l.node.Path(), src, cfg.Conns)
				// The benchmark's process only reads the source
				// (the traffic is a process of its own): its CPU
				// is the reader's.
				cpu0 := cpuTime(b)
				rate := trafficRate(b, cfgPath)
				cpu := cpuTime(b) - cpu0
				stop()
				fmt.Printf("round %d %-8s %6.0f conn/s (conntrack messages %d, nflog packets %d; reader's CPU %.1f µs a connection)\n", round, src, rate, got[0].Load(), got[1].Load(),
					float64(cpu.Microseconds())/float64(cfg.Conns))
				rates[src] = append(rates[src], rate)
			}
		}
	}
	for _, src := range sources {
		var s, s0 float64
		for i := range rates[src] {
			s += rates[src][i]
			s0 += rates["none"][i]
		}
		fmt.Printf("%-8s / none: %.3f (%v against %v)\n", src, s/s0, rates[src], rates["none"])
	}
}

// trafficRate runs the traffic process once and returns its connections
// a second.
func trafficRate(b testing.TB, cfgPath string) float64 {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLOWREC_TRAFFIC="+cfgPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("traffic process: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "conns/s "); ok {
			if rate, err := strconv.ParseFloat(v, 64); err == nil {
				return rate
			}
		}
	}
	b.Fatalf("traffic process printed no rate: %s", out)
	return 0
}

// startSource starts a source in the node's namespace: got counts the
// conntrack messages and the nflog packets it received; stop ends it.
func startSource(b *testing.B, netnsFd int, netnsPath, src string, conns int) (got *[2]atomic.Int64, stop func()) {
	got = new([2]atomic.Int64)
	var stops []func()
	switch src {
	case "none":
	case "bpf":
		p, err := flowrec.OpenConntrackProbes(netnsFd)
		if err != nil {
			b.Fatal(err)
		}
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			b.Fatal(err)
		}
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				got[0].Add(int64(p.Read()))
				select {
				case <-done:
					got[0].Add(int64(p.Read()))
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		stops = append(stops, func() {
			close(done)
			<-stopped
			if n := p.Lost(); n > 0 {
				b.Errorf("conntrack probes: %d records lost", n)
			}
			runs, rt, err := p.Stats()
			if err != nil {
				b.Fatal(err)
			}
			if runs > 0 {
				fmt.Printf("  probes: %d runs, %v in all, %v a connection\n", runs, rt, rt/time.Duration(conns))
			}
			stats.Close()
			p.Close()
		})
	case "ct":
		stops = append(stops, readConntrack(b, netnsFd, false, &got[0], 1, 3))
	case "ctbatch":
		stops = append(stops, readConntrack(b, netnsFd, true, &got[0], 1, 3))
	case "cttimed":
		stops = append(stops, readConntrack(b, netnsFd, true, &got[0], 1, 3))
		// The time ctnetlink spends building and queueing each event
		// in the connection's context, beside the probes' run time
		// (where the kernel allows fexit; the timing's own programs
		// slow the column).
		if clock, err := newFnClock("ctnetlink_conntrack_event"); err != nil {
			b.Fatal(err)
		} else {
			stops = append(stops, func() {
				d, n, err := clock.total()
				if err != nil {
					b.Fatal(err)
				}
				if n > 0 {
					fmt.Printf("  ctnetlink_conntrack_event: %d calls, %v in all, %v a call\n", n, d, d/time.Duration(n))
				}
				clock.close()
			})
		}
	case "destroy":
		stops = append(stops, readConntrack(b, netnsFd, false, &got[0], 3))
	case "ctmask":
		stops = append(stops, readConntrack(b, netnsFd, true, &got[0], 1, 3))
		nft := nftIn(b, netnsPath)
		nft("add table inet bench_sources")
		nft("add chain inet bench_sources prerouting { type filter hook prerouting priority -300 ; }")
		nft("add rule inet bench_sources prerouting ct event set new,destroy")
		stops = append(stops, func() { nft("delete table inet bench_sources") })
	case "nflog":
		stops = append(stops, readConntrack(b, netnsFd, false, &got[0], 3))
		r, err := flowlog.Open(netnsFd, 9)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = r.Run(ctx, func(flowlog.Packet) { got[1].Add(1) }, func() { b.Error("nflog packets lost") })
		}()
		nft := nftIn(b, netnsPath)
		nft("add table inet bench_sources")
		nft("add chain inet bench_sources forward { type filter hook forward priority -5 ; }")
		nft("add rule inet bench_sources forward ct state new log group 9 snaplen 64")
		stops = append(stops, func() { nft("delete table inet bench_sources"); cancel(); r.Close(); <-done })
	case "dump":
		stops = append(stops, dumpConntrack(b, netnsFd, &got[0]))
	case "pollgen", "genrules":
		stops = append(stops, pollGenerations(b, netnsFd, netnsPath, &got[0], src == "pollgen"))
	case "poll":
		read, closeFn, _, err := flowrec.OpenSource("poll", netnsFd)
		if err != nil {
			b.Fatal(err)
		}
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				got[0].Add(int64(len(read())))
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		stops = append(stops, func() {
			close(done)
			<-stopped
			closeFn()
			// The rules stay when a source closes (as when routed
			// stops); the next column measures without them.
			if _, err := flowrec.RemoveGenRules(netnsFd); err != nil {
				b.Fatal(err)
			}
		})
	default:
		b.Fatalf("FLOWREC_SOURCES: unknown source %q (none, bpf, ct, ctbatch, cttimed, ctmask, destroy, nflog, dump, pollgen, genrules, poll)", src)
	}
	return got, func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
}

// nftIn returns a function running an nft command in the namespace.
func nftIn(b *testing.B, netnsPath string) func(cmd string) {
	return func(cmd string) {
		if out, err := exec.Command("nsenter", "--net="+netnsPath, "nft", cmd).CombinedOutput(); err != nil {
			b.Fatalf("nft %s: %v: %s", cmd, err, out)
		}
	}
}

// readConntrack reads conntrack's event groups in the namespace until
// stopped, counting messages (batch: drained every 50 ms instead of a
// blocking read each). The receive buffer is 8 MiB, and a lost event
// fails the benchmark.
func readConntrack(b *testing.B, netnsFd int, batch bool, n *atomic.Int64, groups ...int) (stop func()) {
	fd, err := flowlog.NetfilterSocket(netnsFd)
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range groups {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
			b.Fatal(err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		b.Fatal(err)
	}
	if err := unix.SetNonblock(fd, batch); err != nil {
		b.Fatal(err)
	}
	// A blocking read returns every 100 ms to see whether it is done.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}); err != nil {
		b.Fatal(err)
	}
	var closed atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			_, err := unix.Read(fd, buf)
			switch {
			case err == nil:
				n.Add(1)
			case errors.Is(err, unix.EINTR):
				// A socket with a receive timeout is not restarted
				// after a signal (signal(7)): the runtime's.
			case errors.Is(err, unix.EAGAIN):
				if closed.Load() {
					return
				}
				if batch {
					time.Sleep(50 * time.Millisecond)
				}
			case errors.Is(err, unix.ENOBUFS):
				b.Error("conntrack events lost (ENOBUFS)")
			default:
				b.Errorf("reading conntrack events: %v", err)
				return
			}
		}
	}()
	return func() {
		closed.Store(true)
		<-done
		unix.Close(fd)
	}
}

// dumpConntrack dumps the namespace's IPv4 conntrack table every
// FLOWREC_DUMP_EVERY (default 2 s) until stopped, counting the entries
// read; stop prints how many dumps and entries and their time.
func dumpConntrack(b *testing.B, netnsFd int, n *atomic.Int64) (stop func()) {
	every := 2 * time.Second
	if v := os.Getenv("FLOWREC_DUMP_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("FLOWREC_DUMP_EVERY=%q: want a positive duration", v)
		}
		every = d
	}
	fd := dumpSocket(b, netnsFd)
	done, stopped := make(chan struct{}), make(chan struct{})
	var dumps int
	var spent time.Duration
	go func() {
		defer close(stopped)
		buf := make([]byte, 1<<20)
		for seq := uint32(1); ; seq++ {
			start := time.Now()
			got, err := dumpOnce(fd, seq, buf, 0, 0)
			if err != nil {
				b.Errorf("conntrack dump: %v", err)
				return
			}
			spent += time.Since(start)
			dumps++
			n.Add(int64(got))
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		unix.Close(fd)
		fmt.Printf("  dump: %d dumps, %d entries, %v reading them\n", dumps, n.Load(), spent.Round(time.Millisecond))
	}
}

// dumpOnce asks for the IPv4 conntrack table (with mask, only the
// entries whose mark & mask is mark) and reads it to its end, returning
// the entries read.
func dumpOnce(fd int, seq uint32, buf []byte, mark, mask uint32) (int, error) {
	const ctGet = 1<<8 | 1 // NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_GET
	const ctaMark, ctaMarkMask = 8, 21
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	if mask != 0 {
		for _, a := range [][2]uint32{{ctaMark, mark}, {ctaMarkMask, mask}} {
			attr := make([]byte, 8)
			binary.NativeEndian.PutUint16(attr[0:], 8)
			binary.NativeEndian.PutUint16(attr[2:], uint16(a[0]))
			binary.BigEndian.PutUint32(attr[4:], a[1])
			req = append(req, attr...)
		}
	}
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], ctGet)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], seq)
	req[unix.NLMSG_HDRLEN] = unix.AF_INET // nfgenmsg: family, version 0, res_id 0
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	entries := 0
	for {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return entries, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:m])
		if err != nil {
			return entries, err
		}
		for _, msg := range msgs {
			if msg.Header.Seq != seq {
				continue
			}
			switch msg.Header.Type {
			case unix.NLMSG_DONE:
				return entries, nil
			case unix.NLMSG_ERROR:
				if len(msg.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(msg.Data)); e != 0 {
						return entries, fmt.Errorf("netlink error %d", -e)
					}
				}
			default:
				entries++
			}
		}
	}
}

// pollGenerations runs the pollgen source (BenchmarkEventSources) until
// stopped, counting the entries its filtered dumps read.
func pollGenerations(b *testing.B, netnsFd int, netnsPath string, n *atomic.Int64, poll bool) (stop func()) {
	rules := func(g uint32) string {
		return fmt.Sprintf(`flush chain inet bench_poll pre
add rule inet bench_poll pre ct state new ct mark set ct mark and 0xfffffff0 or 0x%x
add rule inet bench_poll pre tcp flags & (fin | rst) != 0 ct mark set ct mark and 0xffffff0f or 0x%x
add rule inet bench_poll pre ct mark and 0xf0 != 0 ct mark set ct mark and 0xffffff0f or 0x%x
`, g, g<<4, g<<4)
	}
	nftFile := func(script string) {
		cmd := exec.Command("nsenter", "--net="+netnsPath, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("nft -f: %v: %s\n%s", err, out, script)
		}
	}
	nftFile("add table inet bench_poll\nadd chain inet bench_poll pre { type filter hook prerouting priority -150 ; }\n" + rules(1))
	fd := dumpSocket(b, netnsFd)
	done, stopped := make(chan struct{}), make(chan struct{})
	var polls int
	var spent time.Duration
	go func() {
		defer close(stopped)
		if !poll {
			<-done
			return
		}
		buf := make([]byte, 1<<20)
		seq := uint32(1)
		for g := uint32(1); ; g = g%15 + 1 {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			start := time.Now()
			nftFile(rules(g%15 + 1))
			// Packets that took generation g before the rules moved
			// on are confirmed within microseconds.
			time.Sleep(20 * time.Millisecond)
			for _, f := range [][2]uint32{{g, 0x0f}, {g << 4, 0xf0}} {
				got, err := dumpOnce(fd, seq, buf, f[0], f[1])
				seq++
				if err != nil {
					b.Errorf("conntrack dump: %v", err)
					return
				}
				n.Add(int64(got))
			}
			spent += time.Since(start) - 20*time.Millisecond
			polls++
		}
	}()
	return func() {
		close(done)
		<-stopped
		unix.Close(fd)
		nftFile("delete table inet bench_poll")
		fmt.Printf("  pollgen: %d polls, %d entries, %v in them (the rules' replacement included)\n", polls, n.Load(), spent.Round(time.Millisecond))
	}
}

// dumpSocket is a netfilter socket in the namespace for the dump
// columns' requests, with room for a dump's replies.
func dumpSocket(b *testing.B, netnsFd int) int {
	fd, err := flowlog.NetfilterSocket(netnsFd)
	if err != nil {
		b.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		b.Fatal(err)
	}
	return fd
}
