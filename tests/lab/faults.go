package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/internal/testenv"
)

// StopEtcd stops the lab's etcd (its data stays).
func (l *Lab) StopEtcd() { l.etcd.stop(syscall.SIGTERM, 10*time.Second) }

// StartEtcd starts the lab's etcd again on the same data and address.
func (l *Lab) StartEtcd(ctx context.Context) error { return l.startEtcd(ctx) }

// PingResult counts a ping stream.
type PingResult struct {
	Sent, Received int
	// Lost names each unanswered probe: when it was sent and how long
	// the ping process took (well over its 1 s deadline means it waited
	// for a CPU, not only for a reply).
	LostProbes []string
}

// Lost is the number of unanswered pings.
func (r PingResult) Lost() int { return r.Sent - r.Received }

func (r PingResult) String() string {
	s := fmt.Sprintf("%d sent, %d received, %d lost", r.Sent, r.Received, r.Lost())
	if len(r.LostProbes) > 0 {
		s += " (" + strings.Join(r.LostProbes, "; ") + ")"
	}
	return s
}

// PingStream pings to from a pod every interval until ctx ends, and
// returns the counts. Run it in a goroutine around a fault; when the
// fault may be shorter than a probe, use StartPings and wait for probes
// on both sides of it instead.
func (l *Lab) PingStream(ctx context.Context, from Pod, to string, interval time.Duration) PingResult {
	p := l.StartPings(from, to, interval)
	<-ctx.Done()
	return p.Stop()
}

// Pings is a ping stream running in the background (StartPings).
type Pings struct {
	done   atomic.Int64 // probes finished, answered or not
	stop   chan struct{}
	result chan PingResult
}

// StartPings pings to from a pod every interval, the first probe at
// once, until Stop.
func (l *Lab) StartPings(from Pod, to string, interval time.Duration) *Pings {
	p := &Pings{stop: make(chan struct{}), result: make(chan PingResult, 1)}
	go func() {
		var r PingResult
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			r.Sent++
			// One probe per tick with a short deadline, so a gap in
			// forwarding shows up as lost probes rather than a slow one.
			sent := time.Now()
			out, err := nsRun(context.Background(), from.NS, "ping", "-n", "-q", "-c", "1", "-W", "1", to)
			if strings.Contains(out, " 1 received") {
				r.Received++
			} else {
				r.LostProbes = append(r.LostProbes, fmt.Sprintf("sent %s, ping ran %s: %v",
					sent.UTC().Format("15:04:05.000"), time.Since(sent).Round(time.Millisecond), err))
			}
			p.done.Add(1)
			select {
			case <-p.stop:
				p.result <- r
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// Done is the number of probes finished so far.
func (p *Pings) Done() int { return int(p.done.Load()) }

// WaitDone waits until n probes have finished, or says how many had
// after timeout.
func (p *Pings) WaitDone(n int, timeout time.Duration) error {
	err := testenv.Poll(context.Background(), timeout, 20*time.Millisecond, func() (bool, string, error) {
		done := p.Done()
		return done >= n, fmt.Sprintf("%d of %d probes finished", done, n), nil
	})
	if err != nil {
		return fmt.Errorf("ping stream: %w", err)
	}
	return nil
}

// Stop ends the stream after the probe in flight and returns the
// counts.
func (p *Pings) Stop() PingResult {
	close(p.stop)
	return <-p.result
}

// NodeProcessRunning reports whether the lab's routed on node is up.
func (l *Lab) NodeProcessRunning(node string) bool {
	p := l.nodes[node]
	return p != nil && p.running()
}

// NodeLinks returns `ip link` of a node's namespace.
func (l *Lab) NodeLinks(ctx context.Context, node string) (string, error) {
	return nsRun(ctx, node, "ip", "-o", "link", "show")
}

// ForgetPod removes a pod's namespace without a CNI DEL, as when its
// node dies, and stops tracking it.
func (l *Lab) ForgetPod(p Pod) {
	for i, q := range l.pods {
		if q.NS == p.NS {
			l.pods = append(l.pods[:i], l.pods[i+1:]...)
			break
		}
	}
	_ = ip(context.Background(), "", "netns", "del", p.NS)
}

// NodeMetrics fetches a node's Prometheus metrics.
func (l *Lab) NodeMetrics(ctx context.Context, node string) (string, error) {
	return l.NodeHTTP(ctx, node, 9091, "/metrics")
}

// NodeHTTP fetches a path from a node's health (9099) or metrics (9091)
// port from inside its namespace; a non-2xx answer is an error.
func (l *Lab) NodeHTTP(ctx context.Context, node string, port int, path string) (string, error) {
	n, err := l.node(node)
	if err != nil {
		return "", err
	}
	return nsRun(ctx, node, "busybox", "wget", "-q", "-O", "-", fmt.Sprintf("http://%s:%d%s", n.Addr.Addr(), port, path))
}

// NodeProbe fetches a path from a node's health port (9099) from inside
// its namespace and returns the status code and body, whatever the code.
func (l *Lab) NodeProbe(ctx context.Context, node, path string) (int, string, error) {
	n, err := l.node(node)
	if err != nil {
		return 0, "", err
	}
	h, err := netns.GetFromName(node)
	if err != nil {
		return 0, "", err
	}
	defer h.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: DialIn(h)}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:9099%s", n.Addr.Addr(), path), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// SwapEtcdData stops etcd, moves its data to saveTo (empty: deletes it),
// puts restoreFrom's in its place (empty: none, a fresh datastore) and
// starts it again: a wiped or swapped datastore, or a restore.
func (l *Lab) SwapEtcdData(ctx context.Context, saveTo, restoreFrom string) error {
	l.StopEtcd()
	data := filepath.Join(l.Dir, "etcd")
	if saveTo != "" {
		if err := os.Rename(data, saveTo); err != nil {
			return err
		}
	} else if err := os.RemoveAll(data); err != nil {
		return err
	}
	if restoreFrom != "" {
		if err := os.Rename(restoreFrom, data); err != nil {
			return err
		}
	}
	return l.startEtcd(ctx)
}
