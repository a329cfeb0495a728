package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/routed-net/routed/internal/procmem"
	"github.com/routed-net/routed/tests/lab"
)

// sample is one reading of a node's routed: its memory from /proc,
// open files and goroutines from its own metrics page.
type sample struct {
	at             time.Duration // since the churn began
	fds, goroutine float64
	// anon and file are the kernel's RssAnon and RssFile: the heap,
	// stacks and runtime, which only routed can free (a leak grows
	// them), and the resident pages of the executable, page cache shared
	// by every routed of the lab. heap is the Go heap in use.
	anon, file, heap float64
	// What the Go runtime holds besides the heap in use: idle heap
	// spans not yet returned to the kernel, goroutine stacks, and its
	// own metadata (spans, caches, GC bitmaps, the rest of sys).
	retained, stacks, meta float64
	// threads is the process's OS thread count (each holds a Go g0
	// and signal stack, which the runtime never frees).
	threads float64
}

// series are every node's samples in order, and the machine's load
// average at each round (the machine is shared; say how busy it was).
type series struct {
	start time.Time
	nodes map[string][]sample
	load  []float64 // 1-minute load average at each round
}

func newSeries() *series { return &series{start: time.Now(), nodes: map[string][]sample{}} }

// take reads every node once; a node that does not answer is left out of
// this round (and reported by the soak's end checks if it stays away).
func (s *series) take(ctx context.Context, l *lab.Lab) {
	at := time.Since(s.start)
	for _, n := range l.Topo.Nodes {
		if _, seen := s.nodes[n.Name]; !seen {
			// Listed with no samples yet: flat reports a node never
			// sampled instead of passing without it.
			s.nodes[n.Name] = nil
		}
		m, err := l.NodeMetricFamilies(ctx, n.Name)
		if err != nil {
			fmt.Printf("sample %s at %v: %v\n", n.Name, at.Round(time.Second), err)
			continue
		}
		fds, ok1 := m.Sum("process_open_fds", nil)
		g, ok2 := m.Sum("go_goroutines", nil)
		if !ok1 || !ok2 {
			fmt.Printf("sample %s at %v: a process or Go metric is missing\n", n.Name, at.Round(time.Second))
			continue
		}
		st, err := procmem.ReadStatus(l.NodePID(n.Name))
		if err != nil {
			fmt.Printf("sample %s at %v: %v\n", n.Name, at.Round(time.Second), err)
			continue
		}
		heap, _ := m.Sum("go_memstats_heap_inuse_bytes", nil)
		idle, _ := m.Sum("go_memstats_heap_idle_bytes", nil)
		released, _ := m.Sum("go_memstats_heap_released_bytes", nil)
		stacks, _ := m.Sum("go_memstats_stack_inuse_bytes", nil)
		var meta float64
		for _, name := range []string{"go_memstats_mspan_inuse_bytes", "go_memstats_mcache_inuse_bytes", "go_memstats_gc_sys_bytes", "go_memstats_other_sys_bytes", "go_memstats_buck_hash_sys_bytes"} {
			v, _ := m.Sum(name, nil)
			meta += v
		}
		s.nodes[n.Name] = append(s.nodes[n.Name], sample{at: at, fds: fds, goroutine: g, anon: float64(st.Anon), file: float64(st.File),
			heap: heap, retained: idle - released, stacks: stacks, meta: meta, threads: float64(st.Threads)})
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				s.load = append(s.load, v)
			}
		}
	}
}

// window is the mean of a node's samples taken in [from, to).
func window(ss []sample, from, to time.Duration) (mean sample, n int) {
	for _, x := range ss {
		if x.at >= from && x.at < to {
			mean.anon, mean.file, mean.fds, mean.goroutine = mean.anon+x.anon, mean.file+x.file, mean.fds+x.fds, mean.goroutine+x.goroutine
			n++
		}
	}
	if n > 0 {
		d := float64(n)
		mean.anon, mean.file, mean.fds, mean.goroutine = mean.anon/d, mean.file/d, mean.fds/d, mean.goroutine/d
	}
	return mean, n
}

// flat compares every node's first and last span of the measured run
// [from, to) (means of the samples in each) and returns a table and the
// problems: anonymous memory, goroutines or open files that grew by more
// than tolerance (a fraction) from the first span to the last.
// File-backed memory is shown, not checked: it is the executable's pages
// (at most its size, page cache the kernel can reclaim), so its growth
// says which code ran, not that anything leaked.
func (s *series) flat(from, to, span time.Duration, tolerance float64) (string, []string) {
	var b strings.Builder
	var problems []string
	fmt.Fprintf(&b, "%-10s %25s %25s %22s %20s\n", "node", "anon MiB first->last", "file MiB first->last", "goroutines", "open files")
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		ss := s.nodes[name]
		w1, n1 := window(ss, from, from+span)
		w2, n2 := window(ss, to-span, to+time.Hour)
		if n1 == 0 || n2 == 0 {
			problems = append(problems, fmt.Sprintf("%s: no samples in the first or last %v", name, span))
			continue
		}
		fmt.Fprintf(&b, "%-10s %10.1f -> %5.1f (%+5.1f%%) %10.1f -> %5.1f (%+5.1f%%) %6.1f -> %5.1f (%+5.1f%%) %5.1f -> %5.1f (%+5.1f%%)\n", name,
			w1.anon/(1<<20), w2.anon/(1<<20), pct(w1.anon, w2.anon), w1.file/(1<<20), w2.file/(1<<20), pct(w1.file, w2.file),
			w1.goroutine, w2.goroutine, pct(w1.goroutine, w2.goroutine), w1.fds, w2.fds, pct(w1.fds, w2.fds))
		for _, c := range []struct {
			what     string
			from, to float64
			unit     float64
		}{{"anonymous memory (MiB)", w1.anon, w2.anon, 1 << 20}, {"goroutines", w1.goroutine, w2.goroutine, 1}, {"open files", w1.fds, w2.fds, 1}} {
			if c.to > c.from*(1+tolerance) {
				problems = append(problems, fmt.Sprintf("%s: %s grew %.1f%% from the first %v to the last (%.1f -> %.1f)",
					name, c.what, pct(c.from, c.to), span, c.from/c.unit, c.to/c.unit))
			}
		}
	}
	return b.String(), problems
}

func pct(from, to float64) float64 {
	if from == 0 {
		return 0
	}
	return 100 * (to - from) / from
}

// loadSummary is the machine's 1-minute load average over the run.
func (s *series) loadSummary() string {
	if len(s.load) == 0 {
		return "unknown"
	}
	l := append([]float64(nil), s.load...)
	sort.Float64s(l)
	return fmt.Sprintf("min %.1f, median %.1f, max %.1f", l[0], l[len(l)/2], l[len(l)-1])
}

// trend prints every node's memory by span of the run (means):
// anonymous and file-backed, and the Go heap in use, in MiB; a leak
// climbs span after span, a warm-up levels off.
func (s *series) trend(total, span time.Duration) string {
	var b strings.Builder
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "memory by %v span, MiB: anon + file, heap-in-use / idle-not-returned stacks runtime-metadata, OS threads\n", span)
	for _, name := range names {
		fmt.Fprintf(&b, "%-10s", name)
		for from := time.Duration(0); from < total; from += span {
			var sum sample
			n := 0
			for _, x := range s.nodes[name] {
				if x.at >= from && x.at < from+span {
					sum.anon, sum.file, sum.heap = sum.anon+x.anon, sum.file+x.file, sum.heap+x.heap
					sum.retained, sum.stacks, sum.meta = sum.retained+x.retained, sum.stacks+x.stacks, sum.meta+x.meta
					sum.threads += x.threads
					n++
				}
			}
			if n == 0 {
				continue
			}
			d := float64(n) * (1 << 20)
			fmt.Fprintf(&b, " | %.1f + %.1f, %.1f / %.1f %.1f %.1f, %.0f", sum.anon/d, sum.file/d, sum.heap/d,
				sum.retained/d, sum.stacks/d, sum.meta/d, sum.threads/float64(n))
		}
		b.WriteString("\n")
	}
	return b.String()
}
