package flowagg_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestConnsAnonymousIdleClosed: anonymous clients that load the
// sign-in form and keep their connections, as many as the pending
// budget holds, are closed soon, and a node connecting after them is
// served.
func TestConnsAnonymousIdleClosed(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	var held []*bufio.Reader
	for range flowagg.MaxPendingConns {
		conn := tlsDial(t, pki, a.addr)
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		held = append(held, br)
	}
	cert, key := pki.IssueClient(t, "routed-node")
	nc := client(t, pki, cert, key)
	nc.Timeout = 8 * time.Second
	if code := post(t, nc, a.url, batch("node-a", "b", 1, allowedFlow(6))); code != http.StatusNoContent {
		t.Fatalf("a node after %d anonymous clients kept their connections: %d", len(held), code)
	}
	for i, br := range held {
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("anonymous connection %d: %v, want EOF (closed by the aggregator)", i, err)
		}
	}
}

// TestConnsAnonymousBodyCut: the sign-in form's body, announced and not
// sent, holds its pending slot for seconds, not the 30 s ReadTimeout.
func TestConnsAnonymousBodyCut(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	conn := tlsDial(t, pki, a.addr)
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=")
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	start := time.Now()
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the stalled sign-in was not answered and closed within %v: %v", time.Since(start), err)
	}
}
