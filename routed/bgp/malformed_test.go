//go:build !race

package bgp

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/routed/status"
)

// rawPeer is a minimal BGP speaker written for this test: it opens a
// session and sends whatever bytes the test crafts.
type rawPeer struct {
	c   net.Conn
	asn uint32
	id  netip.Addr
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

// dialRaw connects from local to the speaker at remote and completes the
// OPEN/KEEPALIVE exchange (IPv4 unicast, 4-byte AS numbers). After a
// NOTIFICATION the speaker refuses connections until its idle hold
// timer expires: keep trying.
func dialRaw(t *testing.T, local, remote netip.Addr, port uint16, asn uint32) *rawPeer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := tryRaw(local, remote, port, asn)
		if err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("raw peer: no session within 60 s: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func tryRaw(local, remote netip.Addr, port uint16, asn uint32) (*rawPeer, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", netip.AddrPortFrom(remote, port).String())
	if err != nil {
		return nil, err
	}
	p := &rawPeer{c: c, asn: asn, id: local}
	caps := []byte{
		1, 4, 0, 1, 0, 1, // multiprotocol IPv4 unicast
		65, 4, 0, 0, 0, 0, // 4-byte AS
	}
	binary.BigEndian.PutUint32(caps[8:], asn)
	open := []byte{4, 0, 0, 0, 90}
	binary.BigEndian.PutUint16(open[1:], 23456) // AS_TRANS; the real AS is in the capability
	open = append(open, local.AsSlice()...)
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

// TestMalformedUpdatesFromAPeer sends the malformed messages of the
// advisories that made GoBGP v3 panic (GHSA-7235-89m6-f4px,
// GHSA-p3w2-64xm-833j, GHSA-4p9m-8gc4-rw2h, GHSA-8rxh-r2p6-7f2q,
// GHSA-frrj-87jh-2772) from established eBGP peers. The speaker runs in
// this test's process, so a panic fails the test; another session must
// stay Established throughout.
func TestMalformedUpdatesFromAPeer(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	rogueAS := uint32(4200000001)
	type tc struct {
		name  string
		attrs func(nh []byte) [][]byte
	}
	origin := attr(0x40, 1, []byte{0})
	path := attr(0x40, 2, asPath4(rogueAS))
	cases := []tc{
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
	// One passive eBGP peer per case: a peer that sent a NOTIFICATION
	// waits out GoBGP's idle hold time before it may connect again.
	peers := []Peer{meshPeer(l, a, b, 64512)}
	for i := range cases {
		peers = append(peers, Peer{Address: l.addr(10 + i), ASN: rogueAS, Port: l.port, Type: PeerTypeGlobal,
			Name: fmt.Sprintf("rogue%d", i), LocalAddress: a.addr, Passive: true})
	}
	a.sp.SetPeers(peers)
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	good := waitPeer(t, b.sp, a.addr, func(p status.Peer) bool { return p.Established() })

	for i, c := range cases {
		rogue := l.addr(10 + i)
		rp := dialRaw(t, rogue, a.addr, l.port, rogueAS)
		bad := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(8 * i)}), 29)
		marker := netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(8 * i)}), 29)
		rp.send(t, update(bad, c.attrs(rogue.AsSlice())...))
		rp.send(t, update(marker, origin, path, attr(0x40, 3, rogue.AsSlice())))
		// The speaker either ends the session (NOTIFICATION, close) or
		// keeps it and takes the next, valid UPDATE: wait for either.
		closed := make(chan struct{})
		go func() {
			for rp.read() != 0 {
			}
			close(closed)
		}()
		outcome := ""
		deadline := time.Now().Add(20 * time.Second)
		for outcome == "" {
			select {
			case <-closed:
				outcome = "session closed"
			default:
				routes, _ := a.sp.Routes(t.Context())
				for _, r := range routes {
					if r.Prefix == marker.String() {
						outcome = "session kept, malformed route dropped or repaired"
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: the speaker neither closed the session nor took the next UPDATE", c.name)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		rp.c.Close()
		t.Logf("%s: %s", c.name, outcome)
	}
	// Still alive (a panic would have ended this process), and the other
	// session never went down.
	now := waitPeer(t, b.sp, a.addr, func(p status.Peer) bool { return p.Established() })
	if !now.Since.Equal(good.Since) {
		t.Errorf("the a-b session went down while peers sent malformed messages (up since %s, now since %s)", good.Since, now.Since)
	}
}
