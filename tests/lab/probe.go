package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"
)

// InNetNS runs f on a locked OS thread inside the named network
// namespace (a pod's or a node's). Sockets f opens stay in that
// namespace after it returns.
func InNetNS(name string, f func() error) error {
	h, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer h.Close()
	errc := make(chan error, 1)
	// A fresh goroutine: if switching back fails its thread is
	// discarded (never unlocked) rather than reused in the wrong netns.
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// UDPEcho answers every datagram sent to port on a pod's addresses with
// the same bytes, until ctx ends: the far end of a ProbeStream.
func UDPEcho(ctx context.Context, p Pod, port int) error {
	var c net.PacketConn
	if err := InNetNS(p.NS, func() error {
		var err error
		c, err = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	}); err != nil {
		return fmt.Errorf("udp echo in %s: %w", p.Name, err)
	}
	go func() { <-ctx.Done(); c.Close() }()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(buf[:n], from)
		}
	}()
	return nil
}

// TCPListen accepts (and closes) connections on port in a pod until ctx
// ends: a destination whose reachability policy decides.
func TCPListen(ctx context.Context, p Pod, port int) error {
	return tcpListen(ctx, p, "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
}

// TCPListen6 is TCPListen on the pod's IPv6 addresses.
func TCPListen6(ctx context.Context, p Pod, port int) error {
	return tcpListen(ctx, p, "tcp6", fmt.Sprintf("[::]:%d", port))
}

func tcpListen(ctx context.Context, p Pod, network, addr string) error {
	var ln net.Listener
	if err := InNetNS(p.NS, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		return fmt.Errorf("tcp listener in %s: %w", p.Name, err)
	}
	go func() { <-ctx.Done(); ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return nil
}

// TCPConnects reports whether a TCP connection from a pod to addr:port
// (IPv4 or IPv6) completes within timeout (false: dropped or refused on
// the way).
func TCPConnects(from Pod, addr string, port int, timeout time.Duration) (bool, error) {
	network := "tcp4"
	if strings.Contains(addr, ":") {
		network = "tcp6"
	}
	var c net.Conn
	var derr error
	if err := InNetNS(from.NS, func() error {
		c, derr = net.DialTimeout(network, net.JoinHostPort(addr, fmt.Sprint(port)), timeout)
		return nil
	}); err != nil {
		return false, err
	}
	if derr != nil {
		return false, nil
	}
	c.Close()
	return true, nil
}

// Probe is one datagram of a ProbeStream: when it was sent and whether
// its echo came back (at any time before the stream ended).
type Probe struct {
	Sent     time.Time
	Answered bool
}

// ProbeResult is what a ProbeStream saw.
type ProbeResult struct {
	From, To Pod
	Interval time.Duration
	Probes   []Probe
}

// LostBetween counts the unanswered probes sent in [from, to).
func (r ProbeResult) LostBetween(from, to time.Time) int {
	n := 0
	for _, p := range r.Probes {
		if !p.Answered && !p.Sent.Before(from) && p.Sent.Before(to) {
			n++
		}
	}
	return n
}

// Lost counts every unanswered probe.
func (r ProbeResult) Lost() int {
	n := 0
	for _, p := range r.Probes {
		if !p.Answered {
			n++
		}
	}
	return n
}

// Gaps lists the runs of unanswered probes as "hh:mm:ss.mmm +N".
func (r ProbeResult) Gaps() string {
	var out []string
	for i := 0; i < len(r.Probes); i++ {
		if r.Probes[i].Answered {
			continue
		}
		j := i
		for j < len(r.Probes) && !r.Probes[j].Answered {
			j++
		}
		out = append(out, fmt.Sprintf("%s +%d", r.Probes[i].Sent.UTC().Format("15:04:05.000"), j-i))
		i = j
	}
	return strings.Join(out, ", ")
}

func (r ProbeResult) String() string {
	return fmt.Sprintf("%s (%s) -> %s (%s): %d probes every %s, %d lost [%s]",
		r.From.Name, r.From.Node, r.To.Name, r.To.Node, len(r.Probes), r.Interval, r.Lost(), r.Gaps())
}

// ProbeStream sends a numbered UDP datagram from one pod to another's
// UDPEcho on port every interval until ctx ends, then waits up to grace
// for the last echoes and returns which probes were answered. A late
// echo counts as answered: only a probe never answered is lost, so a
// slow machine shows up as latency, not as loss. Unlike PingStream it
// never waits for one probe before sending the next, so a gap in
// forwarding is measured to the interval.
func ProbeStream(ctx context.Context, from, to Pod, port int, interval, grace time.Duration) (ProbeResult, error) {
	res := ProbeResult{From: from, To: to, Interval: interval}
	var c net.PacketConn
	if err := InNetNS(from.NS, func() error {
		var err error
		c, err = net.ListenPacket("udp4", "0.0.0.0:0")
		return err
	}); err != nil {
		return res, fmt.Errorf("probe socket in %s: %w", from.Name, err)
	}
	defer c.Close()
	dst := &net.UDPAddr{IP: net.ParseIP(to.IP), Port: port}
	var mu sync.Mutex
	answered := map[uint64]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				mu.Lock()
				answered[binary.BigEndian.Uint64(buf)] = true
				mu.Unlock()
			}
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	var sent []time.Time
	msg := make([]byte, 16)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
		}
		binary.BigEndian.PutUint64(msg, uint64(len(sent)))
		sent = append(sent, time.Now())
		// A send error (no route yet) is a lost probe like any other.
		_, _ = c.WriteTo(msg, dst)
	}
	time.Sleep(grace)
	c.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i, s := range sent {
		res.Probes = append(res.Probes, Probe{Sent: s, Answered: answered[uint64(i)]})
	}
	return res, nil
}
