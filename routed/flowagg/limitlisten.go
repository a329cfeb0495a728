package flowagg

import (
	"net"
	"net/http"
)

// MaxConns is by default how many connections the aggregator holds
// open at once (nodes, readers and the page together); more wait in the
// kernel's accept queue until one closes.
const MaxConns = 512

// connLimit admits at most n connections at once: Accept takes a slot,
// the server's ConnState hook gives it back when the connection closes.
// (Wrapping the conn would hide its *tls.Conn from net/http, and with
// it the client's certificate.)
type connLimit struct {
	net.Listener
	slots chan struct{}
}

// limitConns wraps ln; srv's ConnState must call release.
func limitConns(ln net.Listener, n int) *connLimit {
	return &connLimit{Listener: ln, slots: make(chan struct{}, n)}
}

// Accept waits for a free slot, then for a connection.
func (l *connLimit) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return c, nil
}

// connState is the http.Server's ConnState: a closed (or hijacked)
// connection frees its slot; each connection reaches one of them once.
func (l *connLimit) connState(_ net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		<-l.slots
	}
}
