package flowagg

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Connection budgets. A connection is pending from its accept until a
// request on it authenticates: a node's batch with an allowed client
// certificate moves it to the nodes' budget, a reader's token or session
// to the readers'. Nodes keep their connections (a batch every 3 s, well
// within the idle timeout), so one budget for all would let nodes lock
// out readers and each other; apart, what one class holds never delays
// another, and only the pending budget blocks accept.
//
// Bound: MaxConns + MaxReaderConns + MaxPendingConns connections (10,320
// file descriptors by default) and, idle, what net/http and crypto/tls
// keep of each (TestConnsManyNodesKeptAlive logs it).
const (
	// MaxConns is by default how many node connections the aggregator
	// holds (twice Kubernetes' 5,000 nodes); one more is answered 503
	// and closed, and its node retries.
	MaxConns = 10_000
	// MaxReaderConns is by default how many signed-in readers'
	// connections it holds (routedctl flows, the page).
	MaxReaderConns = 64
	// MaxPendingConns is by default how many connections not yet
	// authenticated it holds (TLS handshake, first request); more wait
	// in the kernel's accept queue until one is authenticated or closes.
	MaxPendingConns = 256
	// PendingIdleTimeout closes a connection not yet authenticated
	// that waits for its next request (the sign-in form loaded, a 401):
	// only nodes and readers keep theirs for the idle timeout.
	PendingIdleTimeout = 2 * time.Second
	// pendingBodyTimeout bounds reading the body of a request that does
	// not authenticate (the sign-in form, at most 4 KiB).
	pendingBodyTimeout = 5 * time.Second
	// MaxConnsPerNode bounds one node name's connections, so one
	// certificate of the CA cannot take the nodes' budget (a node's
	// sender holds one).
	MaxConnsPerNode = 4
)

// connClass is the budget a connection counts against.
type connClass int

const (
	classPending connClass = iota
	classNode
	classReader
)

// connLimit admits at most pending unauthenticated connections at once
// (Accept waits for a slot) and moves authenticated ones to the nodes'
// or readers' budgets. The server's ConnState hook gives back what a
// connection holds when it closes. (Wrapping the conn would hide its
// *tls.Conn from net/http, and with it the client's certificate.)
type connLimit struct {
	net.Listener
	pending chan struct{}

	mu                  sync.Mutex
	conns               map[net.Conn]*connEntry
	nodes, readers      int
	perNode             map[string]int
	maxNodes, maxReader int
}

// connEntry is what one connection holds.
type connEntry struct {
	class connClass
	node  string      // classNode: the node it sends for
	idle  *time.Timer // classPending, idle: closes it after PendingIdleTimeout
}

// limitConns wraps ln; srv's ConnState must be connState and its
// ConnContext connContext.
func limitConns(ln net.Listener, pending, nodes, readers int) *connLimit {
	return &connLimit{Listener: ln, pending: make(chan struct{}, pending), conns: map[net.Conn]*connEntry{},
		perNode: map[string]int{}, maxNodes: nodes, maxReader: readers}
}

// Accept waits for a free pending slot, then for a connection.
func (l *connLimit) Accept() (net.Conn, error) {
	l.pending <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.pending
		return nil, err
	}
	l.mu.Lock()
	l.conns[c] = &connEntry{class: classPending}
	l.mu.Unlock()
	return c, nil
}

// connState is the http.Server's ConnState: a pending connection gone
// idle is closed after PendingIdleTimeout unless a request comes; a
// closed (or hijacked) connection frees what it holds (each connection
// reaches one of them once).
func (l *connLimit) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.conns[c]
	if e == nil {
		return
	}
	if e.idle != nil {
		e.idle.Stop()
		e.idle = nil
	}
	switch st {
	case http.StateIdle:
		if e.class == classPending {
			e.idle = time.AfterFunc(PendingIdleTimeout, func() { _ = c.Close() })
		}
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
		l.releaseLocked(e)
	}
}

func (l *connLimit) releaseLocked(e *connEntry) {
	switch e.class {
	case classPending:
		<-l.pending
	case classNode:
		l.nodes--
		if l.perNode[e.node]--; l.perNode[e.node] == 0 {
			delete(l.perNode, e.node)
		}
	case classReader:
		l.readers--
	}
}

type connKey struct{}

// connContext is the http.Server's ConnContext: requests find their
// connection's budget by it.
func (l *connLimit) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// promote moves r's connection, authenticated as class (for node, when
// classNode), out of the pending budget; false when that class's budget
// is full: the caller refuses the request and closes the connection. A
// connection keeps the class it first took.
func (l *connLimit) promote(r *http.Request, class connClass, node string) bool {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.conns[c]
	if e == nil || e.class != classPending {
		return true // not served through the limit (a test's handler), or moved already
	}
	switch class {
	case classNode:
		if l.nodes >= l.maxNodes || l.perNode[node] >= MaxConnsPerNode {
			return false
		}
		l.nodes++
		l.perNode[node]++
	case classReader:
		if l.readers >= l.maxReader {
			return false
		}
		l.readers++
	}
	<-l.pending
	e.class, e.node = class, node
	return true
}
