package flowagg

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Lingering close. A connection net/http ends (a request with
// "Connection: close", an idle timeout, a refused batch) gets its TLS
// close_notify and close(2) right after (500 ms after when a request
// body was left unread). The client's own close_notify, sent as it
// reads ours, then meets a socket closed with it unread, or closed
// already, and Linux answers either with a TCP reset. kubectl
// port-forward, the documented way to the aggregator, ends its whole
// session on a reset from the pod ("lost connection to pod"). So the
// TCP connections under TLS close by halves: Close sends the FIN at
// once and returns, and the socket is closed only after what the peer
// still sends was read and discarded, up to its FIN, lingerMax bytes or
// lingerTimeout.
const (
	// lingerTimeout bounds how long a closed connection waits for the
	// peer's FIN (a client closes within a round trip of ours).
	lingerTimeout = time.Second
	// lingerMax bounds what is read and discarded meanwhile: a client
	// still sending a body it was refused is reset, as before.
	lingerMax = 64 << 10
)

// TLSListener is the listener Run serves: TLS with tc over ln's
// connections, each closing by halves (above). It wraps below TLS, so
// net/http and connLimit still see the *tls.Conn.
func TLSListener(ln net.Listener, tc *tls.Config) net.Listener {
	return tls.NewListener(lingerListener{ln}, tc)
}

type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, err
}

// lingerConn is a TCP connection whose Close lingers (above). Close
// never blocks: Server.Shutdown closes its idle connections one after
// another, thousands of nodes' among them, so the lingering is left to
// a goroutine of each, bounded by lingerTimeout.
type lingerConn struct {
	*net.TCPConn
	// closed is set by Close; from then on the goroutine of linger
	// owns the read side and its deadline.
	closed atomic.Bool
	mu     sync.Mutex // orders deadlines set by others against Close's
}

func (c *lingerConn) Close() error {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed.Store(true)
	err := c.TCPConn.SetReadDeadline(time.Now().Add(lingerTimeout))
	c.mu.Unlock()
	if err == nil {
		err = c.TCPConn.CloseWrite()
	}
	if err != nil {
		return c.TCPConn.Close()
	}
	go c.linger()
	return nil
}

// linger reads and discards until the peer's FIN, lingerMax bytes or
// the deadline Close set, then closes the socket.
func (c *lingerConn) linger() {
	buf := make([]byte, 512) // a close_notify is a few dozen bytes
	for n := 0; n < lingerMax; {
		k, err := c.TCPConn.Read(buf)
		if err != nil {
			break
		}
		n += k
	}
	_ = c.TCPConn.Close()
}

// Read fails once Close was called: a request that arrives while the
// socket lingers is not served (its response could not be sent), and
// what a reader blocked at Close gets is discarded with it.
func (c *lingerConn) Read(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.TCPConn.Read(b)
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// SetDeadline and SetReadDeadline are ignored once Close was called:
// net/http sets deadlines from its own goroutine (the idle timeout, no
// deadline at all, one in the past to stop a read), which would
// otherwise lengthen or cut the linger.
func (c *lingerConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	return c.TCPConn.SetDeadline(t)
}

func (c *lingerConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	return c.TCPConn.SetReadDeadline(t)
}
