package flowagg_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testpki"

	"github.com/routed-net/routed/routed/flowagg"
)

// TestConnsClosedWithoutReset: a connection the aggregator ends after
// its answer, whose client then sends its TLS close_notify as curl and
// browsers do, ends with a FIN and no TCP reset: kubectl port-forward,
// the way in to the aggregator, ends its whole session on a reset from
// the pod. Two ways: the client asked for "Connection: close" (the
// aggregator closes at once: the close_notify comes after, or just
// before), and a batch
// announcing a body over net/http's 256 KiB tolerance, refused unread
// (net/http waits 500 ms after its close_notify before it closes: the
// client's comes before).
func TestConnsClosedWithoutReset(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	for _, tc := range []struct{ name, req string }{
		{"Connection: close", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
		{"a refused 300 KB batch", "POST /v1/nodes/n/batches HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 300000\r\n\r\n{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Dial("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			conn := tls.Client(raw, &tls.Config{RootCAs: caPool(t, pki), ServerName: "127.0.0.1"})
			_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				t.Fatalf("the answer's body: %v", err)
			}
			resp.Body.Close()
			if !resp.Close {
				t.Fatalf("%s: the aggregator keeps the connection, want it closed", resp.Status)
			}
			start := time.Now()
			if err := conn.CloseWrite(); err != nil { // the client's close_notify
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, raw); err != nil {
				t.Fatalf("%s, then the connection ended %v after the client's close_notify with %v, want a FIN", resp.Status, time.Since(start).Round(time.Millisecond), err)
			}
			fin := time.Since(start)
			// A reset after the FIN does not show in reads (EOF still):
			// it leaves its error on the socket. The server's socket
			// closes at the latest when its linger ends (lingerTimeout
			// after its FIN): read the error once that is past, so the
			// check covers the whole life of the server's socket.
			time.Sleep(time.Until(start.Add(fin + flowagg.LingerTimeout + 200*time.Millisecond)))
			if err := sockError(raw); err != nil {
				t.Fatalf("%s, a FIN %v after the client's close_notify, then a reset (SO_ERROR %v)", resp.Status, fin.Round(time.Millisecond), err)
			}
			t.Logf("%s, then a FIN %v after the client's close_notify, no reset", resp.Status, fin.Round(time.Millisecond))
		})
	}
}

// sockError is the error a TCP connection's socket holds (SO_ERROR),
// nil when none.
func sockError(c net.Conn) error {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var soerr int
	var gerr error
	if err := rc.Control(func(fd uintptr) { soerr, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ERROR) }); err != nil {
		return err
	}
	if gerr != nil {
		return gerr
	}
	if soerr != 0 {
		return syscall.Errno(soerr)
	}
	return nil
}
