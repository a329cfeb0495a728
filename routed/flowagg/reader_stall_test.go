package flowagg_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestReaderStalledDropped: a follower that stops reading, with more of
// the window to be sent than the sockets hold, is dropped after the
// write timeout; it would otherwise hold what it was sent of the window
// (evicted or not) for as long as its connection lasts.
func TestReaderStalledDropped(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregatorWith(t, pki, "", func(c *flowagg.Config) { c.WriteTimeout = time.Second })
	big := strings.Repeat("v", 32<<10)
	b := batch("node-a", "b", 1)
	for i := range 2000 { // 64 MiB of records, far past loopback's socket buffers
		f := allowedFlow(uint16(i))
		f.Src.Labels = map[string]string{"big": big}
		b.Flows = append(b.Flows, f)
	}
	if err := a.srv.Window().Add(b); err != nil {
		t.Fatal(err)
	}
	conn := tlsDial(t, pki, a.addr)
	fmt.Fprintf(conn, "GET /v1/flows?follow=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if a.srv.Streams() != 1 {
			return "the follower's stream has not started"
		}
		return ""
	})
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() string {
		if n := a.srv.Streams(); n != 0 {
			return fmt.Sprintf("%d stalled follower still being written to", n)
		}
		return ""
	})
}
