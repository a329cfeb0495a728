package cniapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/containernetworking/cni/pkg/types"
)

// Client talks to routed's CNI socket.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client for the socket at path. Requests are bounded
// by their context only: the caller passes its ADD or DEL budget.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns: 1,
	}
	return &Client{path: path, http: &http.Client{Transport: tr}}
}

// Add asks routed to assign the attachment's addresses (and write its
// endpoint). Errors: ErrUnreachable (do it yourself), a *types.Error
// carrying routed's CNI code and message, or the context's error.
func (c *Client) Add(ctx context.Context, req *Request) (*AddReply, error) {
	var r AddReply
	return &r, c.do(ctx, PathAdd, req, &r)
}

// Del asks routed to release the attachment's addresses (and delete its
// endpoint if it is the container's). Errors as Add.
func (c *Client) Del(ctx context.Context, req *Request) (*DelReply, error) {
	var r DelReply
	return &r, c.do(ctx, PathDel, req, &r)
}

func (c *Client) do(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://routed"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("routed's CNI socket %s: %w", c.path, ctx.Err())
		}
		// No socket, nobody accepting, or the connection lost
		// mid-request (routed stopped): whatever routed did is keyed
		// by the handle, so the caller doing it again is safe.
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, c.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: %s: reading the reply: %v", ErrUnreachable, c.path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorReply
		if json.Unmarshal(data, &e) != nil || e.Msg == "" {
			return fmt.Errorf("%w: %s answered %s", ErrUnreachable, c.path, resp.Status)
		}
		if e.Fallback {
			return fmt.Errorf("%w: %s", ErrUnreachable, e.Msg)
		}
		return types.NewError(e.Code, e.Msg, "")
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s: bad reply: %v", ErrUnreachable, c.path, err)
	}
	return nil
}

// IsUnreachable reports whether err means the plugin must do the work
// itself.
func IsUnreachable(err error) bool { return errors.Is(err, ErrUnreachable) }
