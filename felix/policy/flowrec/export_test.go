package flowrec

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// BreakMarkReader closes the running nflog reader's socket (tests of
// the reader's failure and restart).
func (c *Collector) BreakMarkReader() error { return c.breakMarkReader() }

// Probes is the kernel conntrack source (bpfsrc.go) for benchmarks.
type Probes struct {
	s    *bpfSource
	lost atomic.Uint64
}

// OpenConntrackProbes opens the probes in the namespace.
func OpenConntrackProbes(netnsFd int) (*Probes, error) {
	p := &Probes{}
	s, err := openBPF(netnsFd, probeHooks, &p.lost, logrus.NewEntry(logrus.StandardLogger()))
	if err != nil {
		return nil, err
	}
	p.s = s
	return p, nil
}

// Read drains the ring buffer and says how many records it held.
func (p *Probes) Read() int {
	got := 0
	for {
		k, full := p.s.read(func(*ctEvent) {})
		got += k
		if !full {
			return got
		}
	}
}

// Lost is the records the ring buffer had no room for.
func (p *Probes) Lost() uint64 { p.s.countDrops(); return p.lost.Load() }

// Stats sums the programs' runs and run time (the kernel counts them
// while its BPF statistics are on: ebpf.EnableStats).
func (p *Probes) Stats() (runs uint64, runtime time.Duration, err error) {
	for _, prog := range p.s.progs {
		st, err := prog.Stats()
		if err != nil {
			return 0, 0, err
		}
		runs += st.RunCount
		runtime += st.Runtime
	}
	return runs, runtime, nil
}

// Close detaches the programs.
func (p *Probes) Close() { p.s.close() }

// CtEvent is a conntrack event as a source decoded it.
type CtEvent struct {
	Destroy                            bool
	Src, Dst                           netip.Addr
	Proto                              uint8
	Sport, Dport                       uint16
	PktsOut, BytesOut, PktsIn, BytesIn uint64
}

// OpenSource opens a conntrack source in the namespace: "probes" (the
// kernel functions' programs), "poll" (the table read by generations)
// or "events" (ctnetlink's). read drains it (the poll source reads the
// table when its time came).
func OpenSource(kind string, netnsFd int) (read func() []CtEvent, closeFn func(), desc string, err error) {
	var lost atomic.Uint64
	log := logrus.NewEntry(logrus.StandardLogger())
	var src interface {
		ctSource
		close()
	}
	switch kind {
	case "probes":
		var s *bpfSource
		if s, err = openBPF(netnsFd, probeHooks, &lost, log); err == nil {
			src, desc = s, fmt.Sprintf("probes on %v", s.hooks)
		}
	case "events":
		src, err = openConntrack(netnsFd, &lost, log)
	case "poll":
		var s *pollSource
		if s, err = openPoll(netnsFd, 1<<18, &lost, &lost, log); err == nil {
			src, desc = s, "the table read by generations"
		}
	default:
		err = fmt.Errorf("unknown source %q", kind)
	}
	if err != nil {
		return nil, nil, "", err
	}
	read = func() []CtEvent {
		var out []CtEvent
		for {
			_, full := src.read(func(e *ctEvent) {
				out = append(out, CtEvent{Destroy: e.destroy, Src: e.key.srcAddr(), Dst: e.key.dstAddr(), Proto: e.key.proto,
					Sport: e.key.sport, Dport: e.key.dport, PktsOut: e.counts.pktsOut, BytesOut: e.counts.bytesOut,
					PktsIn: e.counts.pktsIn, BytesIn: e.counts.bytesIn})
			})
			if !full {
				return out
			}
		}
	}
	return read, src.close, desc, nil
}

// BreakProbes makes c's probes name kernel functions that do not
// exist (the fallback to ctnetlink's events); before Open.
func BreakProbes(c *Collector) {
	c.hooks = [2]string{"routed_no_such_function_start", "routed_no_such_function_end"}
}

// DumpTable reads the namespace's conntrack entries whose mark & mask
// is mark, described with their marks and TCP states.
func DumpTable(netnsFd int, mark, mask uint32) ([]string, error) {
	t, err := openCtTable(netnsFd)
	if err != nil {
		return nil, err
	}
	defer t.close()
	var out []string
	err = t.dump(mark, mask, func(e *ctEntry) {
		out = append(out, fmt.Sprintf("%d %s:%d -> %s:%d mark %#x tcp state %d id %#x", e.key.proto, e.key.srcAddr(), e.key.sport, e.key.dstAddr(), e.key.dport, e.mark, e.tcpState, e.id))
	})
	return out, err
}

// PollOnce moves the poll source's generations on and reads the closed
// one, at once (benchmarks of its fixed cost).
func PollOnce(netnsFd int) (step func(), closeFn func(), err error) {
	var lost atomic.Uint64
	s, err := openPoll(netnsFd, 1<<18, &lost, &lost, logrus.NewEntry(logrus.StandardLogger()))
	if err != nil {
		return nil, nil, err
	}
	return func() {
		s.rotate(time.Now())
		s.readClosed(time.Now())
		if err := s.sweep(false); err != nil {
			panic(err)
		}
	}, s.close, nil
}
