package lab

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// ProcStat is one routed process's resource use from /proc.
type ProcStat struct {
	RSSKiB int64
	// AnonKiB and FileKiB split RSSKiB: anonymous pages (heap, stacks,
	// runtime) and file-backed ones (the executable's pages, which are
	// page cache the kernel can reclaim and, here, shared by every
	// routed of the lab).
	AnonKiB, FileKiB int64
	CPUTicks         int64 // utime + stime, in USER_HZ (100/s)
}

// Stat reads a running routed's RSS and CPU time.
func (s *Scale) Stat(name string) (ProcStat, error) {
	pid := s.PID(name)
	var st ProcStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			st.RSSKiB, _ = strconv.ParseInt(f[1], 10, 64)
		case "RssAnon:":
			st.AnonKiB, _ = strconv.ParseInt(f[1], 10, 64)
		case "RssFile:":
			st.FileKiB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(rest) < 13 {
		return st, fmt.Errorf("/proc/%d/stat: short line", pid)
	}
	u, _ := strconv.ParseInt(rest[11], 10, 64)
	k, _ := strconv.ParseInt(rest[12], 10, 64)
	st.CPUTicks = u + k
	return st, nil
}

// EtcdCounters are the server-side figures a scale run reads from etcd.
type EtcdCounters struct {
	// Unary counts unary gRPC requests handled (Range, Txn, Put, lease
	// grants...): everything but the watch and keepalive streams.
	Unary float64
	// ByMethod splits Unary by gRPC method (Range, Txn...).
	ByMethod map[string]float64
	// Watchers is the number of watchers etcd holds.
	Watchers float64
}

// Etcd reads etcd's Prometheus metrics.
func (s *Scale) Etcd(ctx context.Context) (EtcdCounters, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: s.Dial}, Timeout: 10 * time.Second}
	return ReadEtcdCounters(ctx, client, s.EtcdMetricsURL())
}

// ReadEtcdCounters reads the request and watcher counters from an etcd's
// /metrics (embedded etcd serves it on its client URL).
func ReadEtcdCounters(ctx context.Context, client *http.Client, url string) (EtcdCounters, error) {
	var c EtcdCounters
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return c, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	return parseEtcdMetrics(resp.Body)
}

func parseEtcdMetrics(r io.Reader) (EtcdCounters, error) {
	m, err := ParseMetrics(r)
	if err != nil {
		return EtcdCounters{}, err
	}
	unary := map[string]string{"grpc_type": "unary"}
	var c EtcdCounters
	var seenUnary, seenWatchers bool
	c.Unary, seenUnary = m.Sum("grpc_server_started_total", unary)
	c.ByMethod = m.SumBy("grpc_server_started_total", "grpc_method", unary)
	c.Watchers, seenWatchers = m.Sum("etcd_debugging_mvcc_watcher_total", nil)
	if !seenUnary || !seenWatchers {
		return c, fmt.Errorf("etcd metrics lack grpc_server_started_total (unary) or etcd_debugging_mvcc_watcher_total")
	}
	return c, nil
}

// FIBWatch records, for every felix node, when each route inside pool
// appeared in (or left) its kernel, from netlink events.
type FIBWatch struct {
	pool netip.Prefix
	mu   sync.Mutex
	seen map[netip.Prefix]map[string]time.Time
	// lost counts pool routes deleted from a node's kernel.
	lost   int
	errs   []error
	cancel func()
	wg     sync.WaitGroup
}

// WatchFIBs subscribes to every felix node's route events.
func (s *Scale) WatchFIBs(pool netip.Prefix) (*FIBWatch, error) {
	w := &FIBWatch{pool: pool, seen: map[netip.Prefix]map[string]time.Time{}}
	done := make(chan struct{})
	w.cancel = func() { close(done) }
	for _, name := range s.Nodes {
		h, err := netns.GetFromName(name)
		if err != nil {
			w.Stop()
			return nil, err
		}
		ch := make(chan netlink.RouteUpdate, 4096)
		err = netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{
			Namespace:     &h,
			ErrorCallback: func(err error) { w.fail(fmt.Errorf("%s: route events: %w", name, err)) },
		})
		h.Close()
		if err != nil {
			w.Stop()
			return nil, fmt.Errorf("%s: subscribe to routes: %w", name, err)
		}
		w.wg.Add(1)
		go w.consume(name, ch)
	}
	return w, nil
}

func (w *FIBWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

func (w *FIBWatch) consume(node string, ch <-chan netlink.RouteUpdate) {
	defer w.wg.Done()
	for u := range ch {
		now := time.Now()
		if u.Dst == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(u.Dst.IP.To4())
		ones, _ := u.Dst.Mask.Size()
		if !ok || !w.pool.Contains(a) || ones == 32 {
			continue
		}
		p := netip.PrefixFrom(a, ones)
		w.mu.Lock()
		switch u.Type {
		case 24: // RTM_NEWROUTE
			m := w.seen[p]
			if m == nil {
				m = map[string]time.Time{}
				w.seen[p] = m
			}
			if _, had := m[node]; !had {
				m[node] = now
			}
		case 25: // RTM_DELROUTE
			w.lost++
		}
		w.mu.Unlock()
	}
}

// AllSeen returns the time the last of nodes got block in its kernel, and
// whether all have.
func (w *FIBWatch) AllSeen(block netip.Prefix, nodes int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.seen[block]
	if len(m) < nodes {
		return time.Time{}, false
	}
	var last time.Time
	for _, t := range m {
		if t.After(last) {
			last = t
		}
	}
	return last, true
}

// Times returns, per node, when block first appeared in its kernel.
func (w *FIBWatch) Times(block netip.Prefix) map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.seen[block])
}

// Lost is how many pool routes left some node's kernel so far.
func (w *FIBWatch) Lost() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// Err is the first subscription error, if any.
func (w *FIBWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		return w.errs[0]
	}
	return nil
}

// Stop ends the subscriptions.
func (w *FIBWatch) Stop() {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

// Delta is what happened between two readings, per method, as "Range 12,
// Txn 3" (methods with no requests left out).
func (c EtcdCounters) Delta(before EtcdCounters) string {
	var parts []string
	for m, v := range c.ByMethod {
		if d := v - before.ByMethod[m]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", m, d))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
