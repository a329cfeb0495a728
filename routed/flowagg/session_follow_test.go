package flowagg_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testpki"
)

// TestSessionFollowEndsAtLogout: a follow stream opened with a page
// session ends when /logout ends the session, not when the page goes.
func TestSessionFollowEndsAtLogout(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	c := client(t, pki, "", "")
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	ck := signIn(t, c, a.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/flows?follow=1", nil)
	req.AddCookie(ck)
	fc := client(t, pki, "", "")
	fc.Timeout = 0
	resp, err := fc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("follow with the session: %s", resp.Status)
	}
	lreq, _ := http.NewRequest("POST", a.url+"/logout", nil)
	lreq.AddCookie(ck)
	lr, err := c.Do(lreq)
	if err != nil {
		t.Fatal(err)
	}
	lr.Body.Close()
	start := time.Now()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("the stream of an ended session went on for %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
}
