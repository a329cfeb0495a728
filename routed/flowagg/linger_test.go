package flowagg

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// lingerPair is a lingering server side and its peer over loopback.
func lingerPair(t *testing.T) (*lingerConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, err := lingerListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	lc, ok := c.(*lingerConn)
	if !ok {
		t.Fatalf("accepted a %T, want a *lingerConn", c)
	}
	t.Cleanup(func() { lc.TCPConn.Close() })
	return lc, peer
}

// closeNow closes c and fails unless Close returned well before the
// linger's end; a second Close is harmless.
func closeNow(t *testing.T, c *lingerConn) time.Time {
	t.Helper()
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a second Close: %v, want net.ErrClosed", err)
	}
	took := time.Since(start)
	t.Logf("Close took %v", took)
	if took > lingerTimeout/4 {
		t.Errorf("Close took %v, want it to return at once (the linger is %v)", took, lingerTimeout)
	}
	return start
}

// socketClosed waits for c's socket to be closed and says when.
func socketClosed(t *testing.T, c *lingerConn) time.Time {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if err := c.TCPConn.SetWriteDeadline(time.Time{}); errors.Is(err, net.ErrClosed) { // the read deadline is the linger's
			return time.Now()
		}
	}
	t.Fatal("the socket is still open 5 s after Close")
	return time.Time{}
}

// TestLingerSilentPeer: Close returns at once and the peer reads the
// FIN; a peer that says nothing more has the socket closed at
// lingerTimeout, after which what it sends is answered by a reset.
func TestLingerSilentPeer(t *testing.T) {
	c, peer := lingerPair(t)
	start := closeNow(t, c)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := peer.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the peer read %d bytes, %v, want the FIN (EOF)", n, err)
	}
	if fin := time.Since(start); fin > lingerTimeout/4 {
		t.Errorf("the FIN came %v after Close, want it at once", fin)
	}
	closed := socketClosed(t, c).Sub(start)
	t.Logf("Close returned at once, the FIN was read, the socket closed %v after Close", closed.Round(time.Millisecond))
	if closed < lingerTimeout*9/10 || closed > 2*time.Second {
		t.Errorf("the socket closed %v after Close, want about %v", closed, lingerTimeout)
	}
	// Now closed, a write of the peer is answered by a reset.
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := peer.Write([]byte("x"))
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
			break
		}
		if err != nil || time.Now().After(end) {
			t.Fatalf("the peer writing after the socket closed: %v, want a reset", err)
		}
	}
}

// TestLingerPeerCloses: what the peer sends after Close is read and
// discarded, and its FIN ends the linger at once, without a reset.
func TestLingerPeerCloses(t *testing.T) {
	c, peer := lingerPair(t)
	start := closeNow(t, c)
	if _, err := peer.Write([]byte("a close_notify, say")); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, peer); err != nil {
		t.Fatalf("the peer reading: %v, want the FIN", err)
	}
	if err := peer.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if closed := socketClosed(t, c).Sub(start); closed > lingerTimeout/2 {
		t.Errorf("the socket closed %v after Close, want at once after the peer's FIN", closed)
	}
}

// TestLingerOwnsReadSide: once closed, reads fail and deadlines set by
// net/http's goroutine neither lengthen nor cut the linger.
func TestLingerOwnsReadSide(t *testing.T) {
	c, peer := lingerPair(t)
	blocked := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 16)); blocked <- err }()
	time.Sleep(50 * time.Millisecond) // the read is blocked
	start := closeNow(t, c)
	_ = c.SetReadDeadline(time.Time{})
	_ = c.SetDeadline(time.Now().Add(time.Hour))
	if _, err := peer.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, net.ErrClosed) {
		t.Errorf("a read blocked at Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Read(make([]byte, 16)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a read after Close: %v, want net.ErrClosed", err)
	}
	if closed := socketClosed(t, c).Sub(start); closed > 2*time.Second {
		t.Errorf("the socket closed %v after Close, want about %v", closed, lingerTimeout)
	}
}
