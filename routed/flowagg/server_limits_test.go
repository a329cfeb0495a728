package flowagg_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestLoginFormBounded: the sign-in form takes only a small
// url-encoded body: a 10 MB post is refused with 413 without being
// read, another content type with 415; the form itself still works.
func TestLoginFormBounded(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	c := client(t, pki, "", "")
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, tc := range []struct {
		name, ctype, body string
		want              int
	}{
		{"10 MB form", "application/x-www-form-urlencoded", "token=" + strings.Repeat("x", 10<<20), http.StatusRequestEntityTooLarge},
		{"JSON", "application/json", `{"token":"` + testToken + `"}`, http.StatusUnsupportedMediaType},
		{"multipart", "multipart/form-data; boundary=x", "--x--", http.StatusUnsupportedMediaType},
		{"wrong token", "application/x-www-form-urlencoded", "token=nope", http.StatusUnauthorized},
		{"the token", "application/x-www-form-urlencoded; charset=utf-8", url.Values{"token": {testToken}}.Encode(), http.StatusSeeOther},
	} {
		resp, err := c.Post(a.url+"/login", tc.ctype, strings.NewReader(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST /login, %s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
}

// tlsDial opens a TLS connection to the aggregator as an anonymous
// client.
func tlsDial(t *testing.T, pki testpki.PKI, addr string) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: caPool(t, pki)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSlowRequestCut: a client that sends its headers and then
// trickles nothing of the body it announced is cut off after the read
// timeout, not held open.
func TestSlowRequestCut(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregatorWith(t, pki, "", func(c *flowagg.Config) { c.ReadTimeout = time.Second })
	conn := tlsDial(t, pki, a.addr)
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection of a stalled body was still open after %v", time.Since(start))
			}
			break // answered and closed
		}
	}
}

// TestFollowOutlivesReadTimeout: a follower's stream goes on past the
// read timeout (it only writes) and gets the flows sent after it.
func TestFollowOutlivesReadTimeout(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregatorWith(t, pki, "", func(c *flowagg.Config) { c.ReadTimeout = time.Second })
	cert, key := pki.IssueClient(t, "routed-node")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/flows?follow=1&port=7", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	c := client(t, pki, "", "")
	c.Timeout = 0
	if code := post(t, client(t, pki, cert, key), a.url, batch("node-a", "b", 1, allowedFlow(6))); code != http.StatusNoContent {
		t.Fatalf("batch before: %d", code)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(2500 * time.Millisecond) // past the read timeout: what the test is about
	nc := client(t, pki, cert, key)
	if code := post(t, nc, a.url, batch("node-a", "b", 2, allowedFlow(7))); code != http.StatusNoContent {
		t.Fatalf("batch: %d", code)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e flowagg.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Flow != nil && e.Flow.DstPort == 7 {
			return
		}
	}
	t.Fatalf("the follower's stream ended without the flow sent after the read timeout: %v", sc.Err())
}

// TestConnectionCap: past MaxPendingConns connections not yet
// authenticated the aggregator serves no more until one closes.
func TestConnectionCap(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregatorWith(t, pki, "", func(c *flowagg.Config) { c.MaxPendingConns = 2 })
	held := []net.Conn{}
	for range 2 {
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		held = append(held, c)
	}
	c := client(t, pki, "", "")
	c.Timeout = 1500 * time.Millisecond
	if resp, err := c.Get(a.url + "/"); err == nil {
		resp.Body.Close()
		t.Fatalf("a third connection was served (%s) while two were held", resp.Status)
	}
	held[0].Close()
	c.Timeout = 10 * time.Second
	resp, err := c.Get(a.url + "/")
	if err != nil {
		t.Fatalf("after a held connection closed: %v", err)
	}
	resp.Body.Close()
}
