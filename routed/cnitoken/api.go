package cnitoken

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// The calls below let routed's other users of the API server
// (routed/nodecond) share this client rather than carry one of their
// own.

// rawBody is a request body sent as it is, with its own content type
// (a patch).
type rawBody struct {
	contentType string
	data        []byte
}

// InClusterClient is routed's own client when it runs in a pod with its
// service account token mounted (see inClusterClient). Outside a
// cluster it fails.
func InClusterClient() (*Client, error) {
	c, _, err := inClusterClient()
	if err != nil {
		return nil, fmt.Errorf("%w: no in-cluster Kubernetes API access: %w", ErrConfig, err)
	}
	return c, nil
}

// Patch sends body to path (a REST path below the server's URL, such as
// /api/v1/nodes/NAME/status) as a PATCH of contentType (for example
// application/strategic-merge-patch+json) and returns the answer's body.
// An answer other than 2xx is an error whose StatusCode is its status.
func (c *Client) Patch(ctx context.Context, path, contentType string, body []byte) ([]byte, error) {
	return c.do(ctx, http.MethodPatch, path, nil, rawBody{contentType: contentType, data: body})
}

// Watch opens a watch of the collection at path (query: its field
// selector and the like; watch=true is added) and returns the stream of
// events, one JSON object each, open until ctx ends or the server ends
// it. The caller closes it.
func (c *Client) Watch(ctx context.Context, path string, query url.Values) (io.ReadCloser, error) {
	q := url.Values{"watch": {"true"}}
	for k, v := range query {
		q[k] = v
	}
	resp, err := c.send(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// StatusCode is the HTTP status of an answer other than 2xx that err
// carries, 0 when the API server did not answer.
func StatusCode(err error) int { return statusCode(err) }
