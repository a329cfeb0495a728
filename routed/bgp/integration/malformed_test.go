package integration

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// TestMalformedUpdatesFromAPeer sends the malformed messages of the
// advisories that made GoBGP v3 panic (GHSA-7235-89m6-f4px,
// GHSA-p3w2-64xm-833j, GHSA-4p9m-8gc4-rw2h, GHSA-8rxh-r2p6-7f2q,
// GHSA-frrj-87jh-2772) from established eBGP peers (a hand-written
// speaker, one lab host per message) to a real routed node that also
// peers with BIRD 2 as its top-of-rack router. The node process must
// stay up, and its session with BIRD must never go down: checked on both
// sides (routed's and BIRD's "since"), and BIRD's route stays in place.
func TestMalformedUpdatesFromAPeer(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	bird := torBird(t, tor, a, "192.168.102.0/24 blackhole")
	c.applyTorPeer(tor, api.BGPPeerSpec{})

	origin := attr(0x40, 1, []byte{0})
	const rogueAS = 4200000001
	path := attr(0x40, 2, asPath4(rogueAS))
	cases := []struct {
		name  string
		attrs func(nh []byte) [][]byte
	}{
		{"unknown well-known attribute", func(nh []byte) [][]byte {
			return [][]byte{origin, path, attr(0x40, 3, nh), attr(0x40, 0x63, []byte{1})}
		}},
		{"NEXT_HOP of 3 bytes", func(nh []byte) [][]byte { return [][]byte{origin, path, attr(0x40, 3, nh[:3])} }},
		{"NEXT_HOP missing", func([]byte) [][]byte { return [][]byte{origin, path} }},
		{"AS_PATH and AS4_PATH", func(nh []byte) [][]byte {
			return [][]byte{origin, path, attr(0x40, 3, nh), attr(0xc0, 17, asPath4(rogueAS, 65001))}
		}},
		{"zero-length AS_PATH from eBGP", func(nh []byte) [][]byte { return [][]byte{origin, attr(0x40, 2, nil), attr(0x40, 3, nh)} }},
		{"AS_PATH segment longer than the attribute", func(nh []byte) [][]byte {
			return [][]byte{origin, attr(0x40, 2, []byte{2, 9, 0, 0, 0, 1}), attr(0x40, 3, nh)}
		}},
		{"attribute length past the message", func(nh []byte) [][]byte { return [][]byte{origin, path, attr(0x40, 3, nh), {0x40, 5, 200, 0}} }},
	}
	// One rogue host per case: a peer that got a NOTIFICATION must wait
	// out GoBGP's idle hold time before it may connect again.
	rogues := make([]*bgptest.Host, len(cases))
	for i := range cases {
		rogues[i] = c.lab.AddHost(fmt.Sprintf("rogue%d", i), 50+i)
		c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: fmt.Sprintf("rogue%d", i)},
			Spec: api.BGPPeerSpec{PeerIP: rogues[i].Addr.String(), ASNumber: rogueAS}})
	}

	a.waitRoutes("route from BIRD", 30*time.Second, has("192.168.102.0/24", tor.Addr.String()))
	before := a.waitPeers("BIRD session up", 10*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, tor.Addr)
		return ok && p.Established()
	})
	good, _ := findPeer(before, tor.Addr)
	birdMark := birdSessionUp(t, bird)

	for i, tc := range cases {
		r := rogues[i]
		rp := dialRaw(t, r, a.host.Addr, rogueAS)
		bad := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(8 * i)}), 29)
		marker := netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(8 * i)}), 29)
		rp.send(t, update(bad, tc.attrs(r.Addr.AsSlice())...))
		rp.send(t, update(marker, origin, path, attr(0x40, 3, r.Addr.AsSlice())))
		// The node either ends the session (NOTIFICATION, close) or keeps
		// it and takes the next, valid UPDATE: wait for either.
		closed := make(chan struct{})
		go func() {
			for rp.read() != 0 {
			}
			close(closed)
		}()
		outcome := ""
		testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() string {
			select {
			case <-closed:
				outcome = "session closed"
				return ""
			case <-a.done:
				t.Fatalf("%s: the routed node exited:\n%s", tc.name, a.out.String())
			default:
			}
			if via := a.sink().Routes[marker.String()]; via != r.Addr.String() {
				return fmt.Sprintf("%s: the node neither closed the session nor took the next UPDATE (marker %s via %q, want %s)", tc.name, marker, via, r.Addr)
			}
			outcome = "session kept, malformed route dropped or repaired"
			return ""
		})
		rp.c.Close()
		if _, learned := a.sink().Routes[bad.String()]; learned && tc.name != "unknown well-known attribute" && tc.name != "AS_PATH and AS4_PATH" {
			t.Errorf("%s: the malformed route %s reached the node's routes", tc.name, bad)
		}
		t.Logf("%s: %s", tc.name, outcome)
	}

	select {
	case <-a.done:
		t.Fatalf("the routed node exited:\n%s", a.out.String())
	default:
	}
	after := a.waitPeers("BIRD session still up", 10*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, tor.Addr)
		return ok && p.Established()
	})
	if now, _ := findPeer(after, tor.Addr); !now.Since.Equal(good.Since) {
		t.Errorf("routed's session with BIRD went down while peers sent malformed messages (up since %s, now since %s)", good.Since, now.Since)
	}
	if change := birdSessionLeftUp(t, bird, birdMark); change != "" {
		t.Errorf("BIRD's session with the node went down meanwhile (BIRD logged %q)", change)
	}
	a.waitRoutes("route from BIRD kept", 5*time.Second, has("192.168.102.0/24", tor.Addr.String()))
}

var birdEstablished = regexp.MustCompile(`(?m)^node_a\s+BGP\s+\S+\s+up\s+(.+?)\s+Established`)

// birdSessionUp waits until BIRD's session with node a is Established
// and returns how much of BIRD's log precedes that point.
func birdSessionUp(t *testing.T, bird *bgptest.Bird) int {
	t.Helper()
	bird.WaitCtl(t, "show protocols node_a", 30*time.Second, birdEstablished.MatchString)
	return len(bird.Log())
}

// birdSessionLeftUp reports a state change of BIRD's protocol node_a
// away from up that BIRD logged after mark (from birdSessionUp), and
// waits until the session is Established again. BIRD's "since" column is
// not used: it moved by 1 ms once with no state change in BIRD's log.
func birdSessionLeftUp(t *testing.T, bird *bgptest.Bird, mark int) string {
	t.Helper()
	birdSessionUp(t, bird)
	return birdLeftUp.FindString(bird.Log()[mark:])
}

var birdLeftUp = regexp.MustCompile(`node_a: State changed to (stop|down|start|flush)`)

// rawPeer is a minimal BGP speaker written for this test: it opens a
// session and sends whatever bytes the test crafts.
type rawPeer struct {
	c net.Conn
}

func bgpMsg(typ byte, body []byte) []byte {
	m := make([]byte, 19, 19+len(body))
	for i := 0; i < 16; i++ {
		m[i] = 0xff
	}
	binary.BigEndian.PutUint16(m[16:], uint16(19+len(body)))
	m[18] = typ
	return append(m, body...)
}

// dialRaw connects from host h to the node at remote:179 and completes
// the OPEN/KEEPALIVE exchange (the unicast family of remote, 4-byte AS
// numbers; over IPv6 from h's IPv6 address). The node may not know the
// peer yet, or still hold it idle: keep trying.
func dialRaw(t *testing.T, h *bgptest.Host, remote netip.Addr, asn uint32) *rawPeer {
	t.Helper()
	local := h.Addr
	if remote.Is6() {
		local = h.Addr6
	}
	var p *rawPeer
	testenv.Eventually(t, 60*time.Second, 300*time.Millisecond, func() string {
		err := h.Do(func() error {
			var err error
			p, err = tryRaw(local, remote, h.Addr, asn)
			return err
		})
		if err != nil {
			return fmt.Sprintf("raw peer %s: no session: %v", local, err)
		}
		return ""
	})
	return p
}

// tryRaw opens a session from local to remote with BGP identifier id.
func tryRaw(local, remote, id netip.Addr, asn uint32) (*rawPeer, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", netip.AddrPortFrom(remote, 179).String())
	if err != nil {
		return nil, err
	}
	p := &rawPeer{c: c}
	caps := []byte{
		1, 4, 0, 1, 0, 1, // multiprotocol IPv4 unicast
		65, 4, 0, 0, 0, 0, // 4-byte AS
	}
	if remote.Is6() {
		caps[3] = 2 // AFI IPv6
	}
	binary.BigEndian.PutUint32(caps[8:], asn)
	open := []byte{4, 0, 0, 0, 90}
	binary.BigEndian.PutUint16(open[1:], 23456) // AS_TRANS; the real AS is in the capability
	open = append(open, id.AsSlice()...)
	open = append(open, byte(2+len(caps)), 2, byte(len(caps)))
	open = append(open, caps...)
	if _, err := c.Write(bgpMsg(1, open)); err != nil {
		c.Close()
		return nil, err
	}
	if typ := p.read(); typ != 1 {
		c.Close()
		return nil, fmt.Errorf("want OPEN, got message type %d", typ)
	}
	if _, err := c.Write(bgpMsg(4, nil)); err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

func (p *rawPeer) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := p.c.Write(b); err != nil {
		t.Fatalf("raw peer: write: %v", err)
	}
}

// read returns the next message's type (0 when the connection closed).
func (p *rawPeer) read() byte {
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h := make([]byte, 19)
	if _, err := io.ReadFull(p.c, h); err != nil {
		return 0
	}
	body := make([]byte, int(binary.BigEndian.Uint16(h[16:]))-19)
	if _, err := io.ReadFull(p.c, body); err != nil {
		return 0
	}
	return h[18]
}

// attr encodes one path attribute.
func attr(flags, typ byte, val []byte) []byte {
	if len(val) > 255 {
		panic("attribute too long for this test")
	}
	return append([]byte{flags, typ, byte(len(val))}, val...)
}

func asPath4(asns ...uint32) []byte {
	if len(asns) == 0 {
		return nil
	}
	b := []byte{2, byte(len(asns))} // AS_SEQUENCE
	for _, a := range asns {
		b = binary.BigEndian.AppendUint32(b, a)
	}
	return b
}

// mpReach6 is an MP_REACH_NLRI attribute announcing the IPv6 prefix
// nlri with next hop nh.
func mpReach6(nh netip.Addr, nlri netip.Prefix) []byte {
	v := []byte{0, 2, 1, 16} // AFI IPv6, SAFI unicast, next hop length
	v = append(v, nh.AsSlice()...)
	v = append(v, 0, byte(nlri.Bits()))
	v = append(v, nlri.Addr().AsSlice()[:(nlri.Bits()+7)/8]...)
	return attr(0x80, 14, v)
}

// update6 builds an UPDATE with attrs only (IPv6 routes ride in
// MP_REACH_NLRI).
func update6(attrs ...[]byte) []byte {
	var pa []byte
	for _, a := range attrs {
		pa = append(pa, a...)
	}
	body := []byte{0, 0}
	body = binary.BigEndian.AppendUint16(body, uint16(len(pa)))
	return bgpMsg(2, append(body, pa...))
}

// update builds an UPDATE announcing nlri with attrs.
func update(nlri netip.Prefix, attrs ...[]byte) []byte {
	var pa []byte
	for _, a := range attrs {
		pa = append(pa, a...)
	}
	body := []byte{0, 0}
	body = binary.BigEndian.AppendUint16(body, uint16(len(pa)))
	body = append(body, pa...)
	body = append(body, byte(nlri.Bits()))
	return bgpMsg(2, append(body, nlri.Addr().AsSlice()[:(nlri.Bits()+7)/8]...))
}
