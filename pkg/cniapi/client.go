package cniapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// maxReply bounds what the client reads of a reply.
const maxReply = 1 << 20

// Client talks to routed's CNI socket.
//
// It writes one HTTP/1.0 request per connection and reads the reply to
// the end of the connection, by hand rather than with net/http: a plugin
// process makes one request and exits, and net/http (with crypto/tls,
// x509 and HTTP/2, which it links) cost the socket-only routed-ipam
// about a third of its page faults at every exec. An HTTP/1.0 request
// makes routed's net/http server answer without chunking and close the
// connection after the reply.
type Client struct {
	path string
}

// NewClient returns a client for the socket at path. Requests are bounded
// by their context only: the caller passes its ADD or DEL budget.
func NewClient(path string) *Client { return &Client{path: path} }

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
	status, data, err := c.roundTrip(ctx, path, body)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("routed's CNI socket %s: %w", c.path, ctx.Err())
		}
		// The connection's deadline is the context's and can fire a
		// moment before the context reports it: the same timeout.
		if _, has := ctx.Deadline(); has && errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("routed's CNI socket %s: %w", c.path, context.DeadlineExceeded)
		}
		// No socket, nobody accepting, or the connection lost
		// mid-request (routed stopped): whatever routed did is keyed
		// by the handle, so the caller doing it again is safe.
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, c.path, err)
	}
	if status != 200 {
		var e ErrorReply
		if json.Unmarshal(data, &e) != nil || e.Msg == "" {
			return fmt.Errorf("%w: %s answered status %d", ErrUnreachable, c.path, status)
		}
		if e.Fallback {
			return fmt.Errorf("%w: %s", ErrUnreachable, e.Msg)
		}
		return types.NewError(e.Code, e.Msg, "")
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s: bad reply: %w", ErrUnreachable, c.path, err)
	}
	return nil
}

// roundTrip posts body to path and returns the reply's status and body.
// The context bounds the whole exchange: its deadline is the
// connection's, and its cancellation closes the connection.
func (c *Client) roundTrip(ctx context.Context, path string, body []byte) (int, []byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.0\r\nHost: routed\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		return 0, nil, fmt.Errorf("sending the request: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(conn, maxReply+16<<10))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the reply: %w", err)
	}
	return parseReply(raw)
}

// errBadReply: the reply is not an HTTP response this client reads.
var errBadReply = errors.New("cniapi: malformed reply")

// parseReply splits an HTTP/1.x response read to the end of the
// connection into its status and body (Content-Length honoured when
// given; chunked transfer coding refused: an HTTP/1.0 request never
// gets it).
func parseReply(raw []byte) (int, []byte, error) {
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		return 0, nil, fmt.Errorf("%w: %d bytes without the end of the header (the connection was closed early?)", errBadReply, len(raw))
	}
	lines := strings.Split(string(head), "\r\n")
	proto, rest, _ := strings.Cut(lines[0], " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
		return 0, nil, fmt.Errorf("%w: status line %q", errBadReply, lines[0])
	}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "content-length":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > len(body) {
				return 0, nil, fmt.Errorf("%w: Content-Length %q with %d bytes of body", errBadReply, v, len(body))
			}
			body = body[:n]
		case "transfer-encoding":
			if !strings.EqualFold(v, "identity") {
				return 0, nil, fmt.Errorf("%w: Transfer-Encoding %q", errBadReply, v)
			}
		}
	}
	if len(body) > maxReply {
		return 0, nil, fmt.Errorf("%w: body larger than %d bytes", errBadReply, maxReply)
	}
	return status, body, nil
}

// IsUnreachable reports whether err means the plugin must do the work
// itself.
func IsUnreachable(err error) bool { return errors.Is(err, ErrUnreachable) }
