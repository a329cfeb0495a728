package enforce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetNS is a pod's network namespace, held open by its fd.
type NetNS struct {
	Pod  string
	Path string
	h    netns.NsHandle
}

// OpenNetNS opens the network namespace at path (/proc/PID/ns/net of a
// process of the pod).
func OpenNetNS(pod, path string) (*NetNS, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("enforce: open %s's netns %s: %w", pod, path, err)
	}
	return &NetNS{Pod: pod, Path: path, h: h}, nil
}

// Close releases the namespace's fd.
func (n *NetNS) Close() { _ = n.h.Close() }

// Verdict is what one probe saw.
type Verdict int

// A probe is Answered when the destination's kernel answered the SYN,
// with a SYN-ACK or a reset: for a denied flow both are leaks. Connected
// is the subset that completed the handshake.
const (
	NoAnswer Verdict = iota
	Answered
	Connected
)

// inNetNS runs f on an OS thread that has entered ns. The thread is
// never unlocked: it ends with the goroutine, so no other goroutine ever
// runs in the pod's namespace. Sockets f creates stay in ns.
func inNetNS(ns *NetNS, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns.h); err != nil {
			errc <- fmt.Errorf("enforce: enter %s's netns: %w", ns.Pod, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Dial sends one SYN from inside ns to addr (a fresh flow) and says
// whether it was answered within timeout. The sample's time brackets
// the SYN: a non-blocking connect(2) transmits it (and the host's
// policy sees it) before it returns, so At is taken just before the
// call and Spread is how long the call took; a thread stalled there
// under load shows as a large Spread, not as a wrong verdict at a wrong
// time. A SYN retransmitted before the answer (TCP_INFO) counts as
// unanswered: the verdict is the first SYN's.
func Dial(ns *NetNS, to netip.AddrPort, timeout time.Duration) Sample {
	s := Sample{At: time.Now()}
	_ = inNetNS(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			s.Spread = time.Hour
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}
		lo := time.Now()
		err = unix.Connect(fd, sa)
		s.At, s.Spread = lo, time.Since(lo)
		switch {
		case errors.Is(err, unix.ECONNREFUSED):
			s.Verdict = Answered
			return nil
		case err != nil && !errors.Is(err, unix.EINPROGRESS):
			s.Spread = time.Hour // not a probe: never counted
			return err
		}
		for {
			left := time.Until(lo.Add(timeout))
			if left <= 0 {
				return nil
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			n, err := unix.Poll(pfd, int(left/time.Millisecond)+1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n == 0 {
				return err
			}
			soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err != nil {
				return err
			}
			info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
			if err != nil {
				return err
			}
			if info.Total_retrans > 0 {
				return nil
			}
			switch syscall.Errno(soerr) {
			case 0:
				s.Verdict = Connected
			case unix.ECONNREFUSED:
				s.Verdict = Answered
			}
			return nil
		}
	})
	return s
}

// Listen opens a TCP listener inside ns that accepts and closes every
// connection until ctx ends.
func Listen(ctx context.Context, ns *NetNS, port int) error {
	var l net.Listener
	if err := inNetNS(ns, func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		return fmt.Errorf("enforce: listen in %s: %w", ns.Pod, err)
	}
	go func() { <-ctx.Done(); l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return nil
}

// Pair is one probed flow: from a pod's namespace to an address.
type Pair struct {
	Name string
	From *NetNS
	To   netip.AddrPort
}

// Sample is one probe's result: its SYN left in [At, At+Spread].
type Sample struct {
	At      time.Time
	Spread  time.Duration
	Verdict Verdict
}

// maxSpread is the widest bracket of a SYN's sending time that is
// counted; a wider one (the probing thread stalled inside connect) is
// dropped from every figure and check and counted in Imprecise.
const maxSpread = 10 * time.Millisecond

// Prober probes each of its pairs every Interval with a fresh
// connection (a new flow each time, so conntrack never carries an old
// verdict) and keeps every result.
type Prober struct {
	Interval, Timeout time.Duration

	mu        sync.Mutex
	samples   map[string][]Sample
	imprecise int
	wg        sync.WaitGroup
}

// Imprecise is how many probes were dropped for a SYN time known less
// precisely than maxSpread.
func (p *Prober) Imprecise() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.imprecise
}

// Start probes pairs until ctx ends; Wait waits for the last probes.
func (p *Prober) Start(ctx context.Context, pairs []Pair) {
	p.mu.Lock()
	if p.samples == nil {
		p.samples = map[string][]Sample{}
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		p.wg.Add(1)
		go func(pr Pair) {
			defer p.wg.Done()
			t := time.NewTicker(p.Interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					s := Dial(pr.From, pr.To, p.Timeout)
					p.mu.Lock()
					if s.Spread <= maxSpread {
						p.samples[pr.Name] = append(p.samples[pr.Name], s)
					} else {
						p.imprecise++
					}
					p.mu.Unlock()
				}()
			}
		}(pr)
	}
}

// Wait returns when every probe started has finished.
func (p *Prober) Wait() { p.wg.Wait() }

// Samples returns pair's results sent in [from, to), in sending order.
func (p *Prober) Samples(pair string, from, to time.Time) []Sample {
	p.mu.Lock()
	var out []Sample
	for _, s := range p.samples[pair] {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// allowed is the verdict an allowed flow must see on every probe.
func allowed(v Verdict) bool { return v == Connected }

// Settled reports whether the last n probes of pair sent after from all
// saw want (true: connected, false: no answer).
func (p *Prober) Settled(pair string, from time.Time, want bool, n int) bool {
	s := p.Samples(pair, from, time.Now().Add(time.Hour))
	if len(s) < n {
		return false
	}
	for _, x := range s[len(s)-n:] {
		if !matches(x.Verdict, want) {
			return false
		}
	}
	return true
}

func matches(v Verdict, want bool) bool {
	if want {
		return allowed(v)
	}
	return v == NoAnswer
}

// Change is when pair's verdict changed to want after t0: the sending
// time of the first probe of the final run of probes that all saw want.
// Flaps counts probes before that run that already saw want (a verdict
// that came and went).
type Change struct {
	Pair  string
	After time.Duration
	Flaps int
	// FlapAt are the flapping probes' sending times after t0.
	FlapAt []time.Duration
}

// ChangeAfter finds the change of pair to want among probes sent in
// [t0, end). ok is false when the last probe did not see want.
func (p *Prober) ChangeAfter(pair string, t0, end time.Time, want bool) (Change, bool) {
	s := p.Samples(pair, t0, end)
	i := len(s)
	for i > 0 && matches(s[i-1].Verdict, want) {
		i--
	}
	if i == len(s) {
		return Change{Pair: pair}, false
	}
	ch := Change{Pair: pair, After: s[i].At.Sub(t0)}
	for _, x := range s[:i] {
		if matches(x.Verdict, want) {
			ch.Flaps++
			ch.FlapAt = append(ch.FlapAt, x.At.Sub(t0))
		}
	}
	return ch, true
}

// Count returns how many of pair's probes sent in [from, to) saw each
// verdict.
func (p *Prober) Count(pair string, from, to time.Time) (total, answered, connected int) {
	for _, s := range p.Samples(pair, from, to) {
		total++
		if s.Verdict != NoAnswer {
			answered++
		}
		if s.Verdict == Connected {
			connected++
		}
	}
	return total, answered, connected
}
