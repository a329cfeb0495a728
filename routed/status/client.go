package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// ErrNotRunning means nothing serves the status socket: routed is not
// running (or runs with another --status-socket).
var ErrNotRunning = errors.New("status: routed is not running")

// Client reads status from a running routed.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client for the socket at path (see SocketPath).
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}
	return &Client{path: path, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// Peers returns the configured BGP sessions.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var v []Peer
	return v, c.get(ctx, PathPeers, &v)
}

// Routes returns the RIB.
func (c *Client) Routes(ctx context.Context) ([]Route, error) {
	var v []Route
	return v, c.get(ctx, PathRoutes, &v)
}

// Process returns facts about the running routed.
func (c *Client) Process(ctx context.Context) (Process, error) {
	var v Process
	return v, c.get(ctx, PathProcess, &v)
}

// Profile copies the runtime profile name (heap, goroutine, allocs...)
// of the running routed to w, in pprof's format.
func (c *Client) Profile(ctx context.Context, name string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routed"+PathProfile+url.PathEscape(name), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.dialErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("status: profile %q: routed answered %s: %s", name, resp.Status, strings.TrimSpace(string(body)))
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("status: profile %q: %w", name, err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routed"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.dialErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorReply(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("status: reading reply: %w", err)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("status: bad reply: %w", err)
	}
	return nil
}

// dialErr says why a request got no answer.
func (c *Client) dialErr(err error) error {
	if notRunning(err) {
		return fmt.Errorf("%w (socket %s)", ErrNotRunning, c.path)
	}
	return fmt.Errorf("status: %s: %w", c.path, err)
}

// errorReply reads the error a non-200 answer carries.
func errorReply(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e errorBody
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return fmt.Errorf("status: routed: %s", e.Error)
	}
	return fmt.Errorf("status: routed answered %s", resp.Status)
}

// notRunning reports whether a dial error means no server: the socket
// is missing or nobody accepts on it.
func notRunning(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.ECONNREFUSED)
}
