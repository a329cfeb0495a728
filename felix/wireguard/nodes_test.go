package wireguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// mirror is an impl that keeps what is written to it as the device's
// state, as a kernel device would.
type mirror struct{ dev wgtypes.Device }

func (m *mirror) configure(c wgtypes.Config) error {
	if c.PrivateKey != nil {
		m.dev.PrivateKey = *c.PrivateKey
	}
	if c.ListenPort != nil {
		m.dev.ListenPort = *c.ListenPort
	}
	if c.FirewallMark != nil {
		m.dev.FirewallMark = *c.FirewallMark
	}
	for _, pc := range c.Peers {
		i := -1
		for j, p := range m.dev.Peers {
			if p.PublicKey == pc.PublicKey {
				i = j
			}
		}
		switch {
		case pc.Remove && i >= 0:
			m.dev.Peers = append(m.dev.Peers[:i], m.dev.Peers[i+1:]...)
			continue
		case pc.Remove || (pc.UpdateOnly && i < 0):
			continue
		case i < 0:
			m.dev.Peers = append(m.dev.Peers, wgtypes.Peer{PublicKey: pc.PublicKey})
			i = len(m.dev.Peers) - 1
		}
		p := &m.dev.Peers[i]
		if pc.Endpoint != nil {
			p.Endpoint = pc.Endpoint
		}
		if pc.PersistentKeepaliveInterval != nil {
			p.PersistentKeepaliveInterval = *pc.PersistentKeepaliveInterval
		}
		if pc.ReplaceAllowedIPs {
			p.AllowedIPs = nil
		}
		p.AllowedIPs = append(p.AllowedIPs, pc.AllowedIPs...)
	}
	return nil
}

func (m *mirror) read() (*wgtypes.Device, error) {
	d := m.dev
	d.Peers = append([]wgtypes.Peer(nil), m.dev.Peers...)
	return &d, nil
}
func (m *mirror) close() error { return nil }
func (m *mirror) kind() string { return "mirror" }

// linkNS is a new network namespace holding a veth link named name (this kernel has no dummy links),
// and a handle in it.
func linkNS(t *testing.T, name string) *netlink.Handle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (a network namespace)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("back to the test's namespace: %v", err))
		}
	}()
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 1420}, PeerName: name + "p"}); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestAdoptedDeviceKnowsPeersNodes: a Device that finds the device as
// it wants it (routed restarted: the device outlived it) has nothing to
// write, yet learns which node each peer is, so that a node whose key
// is replaced next is greeted at once by node (kickRekeyed), not only
// when its endpoint is still the one the device saw.
func TestAdoptedDeviceKnowsPeersNodes(t *testing.T) {
	const name = "wg.nodes"
	h := linkNS(t, name)
	priv := testPrivateKey(t)
	old, replacement := testPublicKey(t), testPublicKey(t)
	peer := func(k wgtypes.Key) map[wgtypes.Key]Peer {
		return map[wgtypes.Key]Peer{k: {Node: "node-b", PublicKey: k, Endpoint: netip.MustParseAddrPort("192.0.2.2:51820"),
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.3.1.0/26")}, Keepalive: 0}}
	}
	want := Desired{Up: true, PrivateKey: priv, Port: 51820, MTU: 1420, Peers: peer(old), KnownKey: true}
	m := &mirror{}
	first := &Device{Name: name, dev: m, log: log, want: want}
	if _, err := first.Apply(h, true); err != nil {
		t.Fatal(err)
	}
	if len(m.dev.Peers) != 1 || m.dev.Peers[0].PublicKey != old {
		t.Fatalf("device after the first Apply: %+v", m.dev.Peers)
	}

	// routed restarted: a new Device over the same device.
	again := &Device{Name: name, dev: &countingMirror{mirror: m}, log: log, want: want}
	if _, err := again.Apply(h, true); err != nil {
		t.Fatal(err)
	}
	if n := again.dev.(*countingMirror).writes; n != 0 {
		t.Fatalf("the adopted device was written %d times, want none (it is as wanted)", n)
	}
	again.want.Peers = peer(replacement)
	if got := again.nodeOf(old); got != "node-b" {
		t.Errorf("the replaced key's node is %q, want node-b", got)
	}
	// The kernel device's endpoint moved (the peer roams, or is behind
	// NAT): the node, not the endpoint, says which peer the new key
	// replaces. The old key's session was live (greeted whatever the
	// keys' order).
	m.dev.Peers[0].Endpoint = &net.UDPAddr{IP: net.ParseIP("198.51.100.7"), Port: 40000}
	m.dev.Peers[0].LastHandshakeTime = time.Now()
	cfg, _ := diff(&m.dev, again.want)
	if n := kickRekeyed(&cfg, &m.dev, priv.PublicKey(), time.Time{}, m.read, again.nodeOf); n != 1 {
		t.Errorf("kickRekeyed greeted %d peers, want the replacement of node-b's key", n)
	}
}

// testPrivateKey is a new private key.
func testPrivateKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testPublicKey is a new public key.
func testPublicKey(t *testing.T) wgtypes.Key { return testPrivateKey(t).PublicKey() }

// countingMirror counts writes to a mirror.
type countingMirror struct {
	*mirror
	writes int
}

func (c *countingMirror) configure(cfg wgtypes.Config) error {
	c.writes++
	return c.mirror.configure(cfg)
}

// closeCounter is a recorder that counts close calls.
type closeCounter struct {
	recorder
	closed int
}

func (c *closeCounter) close() error { c.closed++; return nil }

// TestApplyKeepsDeviceOnLinkError: an error reading the link that does
// not say it is gone (a netlink error: ENOBUFS, EINTR) fails Apply and
// keeps the device, and its sessions, for the next one; a link that is
// gone is made again.
func TestApplyKeepsDeviceOnLinkError(t *testing.T) {
	const name = "wg.linkerr"
	h := linkNS(t, name)
	priv := testPrivateKey(t)
	want := Desired{Up: true, PrivateKey: priv, MTU: 1420}
	dev := &closeCounter{}
	d := &Device{Name: name, dev: dev, log: log, want: want}
	linkByName = func(*netlink.Handle, string) (netlink.Link, error) { return nil, unix.ENOBUFS }
	_, err := d.Apply(h, false)
	linkByName = (*netlink.Handle).LinkByName
	if !errors.Is(err, unix.ENOBUFS) {
		t.Errorf("Apply returned %v, want the netlink error", err)
	}
	if dev.closed != 0 || d.dev == nil {
		t.Errorf("the device was closed (%d times) or dropped (%v) on an error that is not its absence", dev.closed, d.dev == nil)
	}

	if err := h.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		t.Fatal(err)
	}
	// Making it again is not this test's (no namespace path here);
	// the close is what shows it was taken for gone.
	_, _ = d.Apply(h, false)
	if dev.closed != 1 {
		t.Errorf("a device whose link is gone was closed %d times, want 1", dev.closed)
	}
}
