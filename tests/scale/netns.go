package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/tests/lab"
)

// dialer opens TCP connections inside one network namespace.
type dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// dialerIn returns a dialer whose sockets are created in namespace ns: on
// a thread switched into ns for the socket call, where they stay.
func dialerIn(ns string) (dialer, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", ns, err)
	}
	return lab.DialIn(h), nil
}

// httpGet fetches url with a client dialling through d and returns the
// status code and body.
func httpGet(ctx context.Context, d dialer, url string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: d, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrape fetches and parses a Prometheus page through d.
func scrape(ctx context.Context, d dialer, url string) (lab.Metrics, error) {
	code, body, err := httpGet(ctx, d, url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", url, code)
	}
	return lab.ParseMetrics(strings.NewReader(body))
}
