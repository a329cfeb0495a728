package bgptest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/internal/testenv"
)

// RequireRoot stops a test that needs root: a failure under CI (which
// runs as root), a loud skip elsewhere.
func RequireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
}

// Lab is a set of network namespaces ("hosts") on one subnet, each
// joined by a veth pair to a Linux bridge in a "switch" namespace. Names
// are unique per process and lab, so labs of tests running side by side
// never collide; everything is deleted in t.Cleanup.
type Lab struct {
	t      testing.TB
	prefix string
	// Subnet is the hosts' subnet; the switch's bridge has its last
	// address (.254 in a /24).
	Subnet netip.Prefix
	// Subnet6, once EnableIPv6 set it, is the hosts' IPv6 subnet: each
	// host gets the address ending in its index, the switch ::fe.
	Subnet6 netip.Prefix
	Switch  *Host
	mu      sync.Mutex
	hosts   []*Host
}

// Host is one network namespace with an address on the lab subnet.
type Host struct {
	Name string
	// NetNS is the namespace name (as ip netns shows it).
	NetNS string
	Addr  netip.Addr
	// Addr6 is the host's IPv6 address on the lab's Subnet6 (invalid
	// when the lab has none).
	Addr6  netip.Addr
	handle netns.NsHandle
	lab    *Lab
}

var labSeq atomic.Int32

// NewLab creates the switch namespace with its bridge. subnet must be a
// /24, e.g. 10.77.0.0/24; as each lab is its own set of namespaces,
// labs may use the same subnet.
func NewLab(t testing.TB, subnet string) *Lab {
	t.Helper()
	RequireRoot(t)
	l := &Lab{t: t, prefix: fmt.Sprintf("rbt%d-%d-", os.Getpid(), labSeq.Add(1)), Subnet: netip.MustParsePrefix(subnet)}
	sw, err := l.newNS("sw")
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	l.Switch = sw
	t.Cleanup(l.destroy)
	h, err := netlink.NewHandleAt(sw.handle)
	if err != nil {
		t.Fatalf("lab: netlink in switch: %v", err)
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatalf("lab: bridge: %v", err)
	}
	sw.Addr = l.addr(254)
	if err := h.AddrAdd(br, &netlink.Addr{IPNet: ipnet(sw.Addr, l.Subnet.Bits())}); err != nil {
		t.Fatalf("lab: bridge address: %v", err)
	}
	for _, name := range []string{"br0", "lo"} {
		if err := setUp(h, name); err != nil {
			t.Fatalf("lab: %v", err)
		}
	}
	return l
}

func (l *Lab) addr(i int) netip.Addr {
	b := l.Subnet.Addr().As4()
	b[3] = byte(i)
	return netip.AddrFrom4(b)
}

// EnableIPv6 gives the lab an IPv6 subnet (a /64 such as fd00:77::/64):
// the switch's bridge gets ::fe and every host added afterwards the
// address ending in its index, without duplicate address detection so
// that they are usable at once.
func (l *Lab) EnableIPv6(subnet string) {
	l.t.Helper()
	l.Subnet6 = netip.MustParsePrefix(subnet).Masked()
	h, err := netlink.NewHandleAt(l.Switch.handle)
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	defer h.Close()
	br, err := h.LinkByName("br0")
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	l.Switch.Addr6 = l.addr6(0xfe)
	if err := h.AddrAdd(br, addr6(l.Switch.Addr6, l.Subnet6.Bits())); err != nil {
		l.t.Fatalf("lab: bridge IPv6 address: %v", err)
	}
}

func (l *Lab) addr6(i int) netip.Addr {
	b := l.Subnet6.Addr().As16()
	b[14], b[15] = byte(i>>8), byte(i)
	return netip.AddrFrom16(b)
}

// addr6 is an IPv6 interface address without duplicate address detection.
func addr6(a netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 128)}, Flags: unix.IFA_F_NODAD}
}

// newNS creates a named namespace without moving this goroutine into it.
func (l *Lab) newNS(short string) (*Host, error) {
	name := l.prefix + short
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name) // also switches this thread into it
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the original netns: %v", err))
	}
	host := &Host{Name: short, NetNS: name, handle: h, lab: l}
	l.mu.Lock()
	l.hosts = append(l.hosts, host)
	l.mu.Unlock()
	return host, nil
}

// AddHost creates a host namespace with eth0 at the lab subnet's index-th
// address (1-253), cabled to the switch.
func (l *Lab) AddHost(name string, index int) *Host {
	l.t.Helper()
	host, err := l.newNS(name)
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	host.Addr = l.addr(index)
	sw, err := netlink.NewHandleAt(l.Switch.handle)
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	defer sw.Close()
	hn, err := netlink.NewHandleAt(host.handle)
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	defer hn.Close()
	port := fmt.Sprintf("p%d", index)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port}, PeerName: "eth0", PeerNamespace: netlink.NsFd(host.handle)}
	if err := sw.LinkAdd(veth); err != nil {
		l.t.Fatalf("lab: veth for %s: %v", name, err)
	}
	br, err := sw.LinkByName("br0")
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	p, err := sw.LinkByName(port)
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	if err := sw.LinkSetMaster(p, br); err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	if err := sw.LinkSetUp(p); err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	eth, err := hn.LinkByName("eth0")
	if err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	if err := hn.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(host.Addr, l.Subnet.Bits())}); err != nil {
		l.t.Fatalf("lab: %v", err)
	}
	if l.Subnet6.IsValid() {
		host.Addr6 = l.addr6(index)
		if err := hn.AddrAdd(eth, addr6(host.Addr6, l.Subnet6.Bits())); err != nil {
			l.t.Fatalf("lab: IPv6 address: %v", err)
		}
	}
	for _, n := range []string{"eth0", "lo"} {
		if err := setUp(hn, n); err != nil {
			l.t.Fatalf("lab: %v", err)
		}
	}
	return host
}

// Listen opens a listener inside h's namespace. Accepting on it works
// from any goroutine: the socket stays in the namespace it was made in.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Do runs f on a thread inside h's namespace. f must not start
// goroutines that need the namespace: they may run on other threads.
func (h *Host) Do(f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(h.handle); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime then discards it rather
		// than reuse a thread stuck in the wrong namespace.
		return fmt.Errorf("cannot return to the original netns: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Start starts cmd inside h's namespace: the child is forked from a
// thread that is in the namespace, so the whole process lives there.
func (h *Host) Start(cmd *exec.Cmd) error {
	return h.Do(cmd.Start)
}

// Command returns a command that runs inside h's namespace via
// "ip netns exec" (for quick one-shot tools).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NetNS, name}, args...)...)
}

// Proxy forwards TCP connections made to listenAddr inside h's
// namespace to target, dialled from the test process's own namespace.
// It lets hosts reach a service (an embedded etcd) on the test's
// loopback without giving the root namespace any lab address.
func (h *Host) Proxy(t testing.TB, listenAddr, target string) {
	t.Helper()
	l, err := h.Listen("tcp", listenAddr)
	if err != nil {
		t.Fatalf("proxy listen in %s: %v", h.NetNS, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
}

func (l *Lab) destroy() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		h.handle.Close()
		_ = netns.DeleteNamed(h.NetNS)
	}
	l.hosts = nil
}

func setUp(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("link %s up: %w", name, err)
	}
	return nil
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}
