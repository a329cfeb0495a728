package cnitoken

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The three requests routed makes of the API server (a TokenRequest, a
// DaemonSet read and a watch of it) are plain HTTPS with JSON, made here
// without client-go: its REST client, scheme and serializers were 4.8 MB
// of the node binary and, on an idle node, about 4 MiB of its
// file-backed memory, for three calls (docs/benchmarks.md, node memory).

// Where a pod finds its API server access (what client-go's
// rest.InClusterConfig reads).
const (
	saDir         = "/var/run/secrets/kubernetes.io/serviceaccount"
	saTokenFile   = saDir + "/token"
	saCAFile      = saDir + "/ca.crt"
	saNamespaceFn = saDir + "/namespace"
)

// requestTimeout bounds one request other than a watch.
const requestTimeout = 30 * time.Second

// maxBody bounds what is read of an answer (a TokenRequest or a
// DaemonSet: a few kilobytes).
const maxBody = 4 << 20

// ClientConfig is how routed reaches the API server.
type ClientConfig struct {
	// Server is the API server's URL (https://host:port).
	Server string
	// CAData is the PEM of the CA that signs the server's certificate.
	CAData []byte
	// Token is routed's bearer token; TokenFile, when set instead, is
	// read on every request (a projected service account token is
	// rotated by kubelet).
	Token, TokenFile string
	// UserAgent names routed in the API server's logs.
	UserAgent string
	// PingAfter and PingTimeout: an HTTP/2 connection silent for
	// PingAfter (0: 30 s) is pinged, and closed, failing its requests
	// and watches, when no answer comes within PingTimeout (0: 15 s),
	// client-go's figures. Without them a watch over a connection the
	// network silently lost (an API server's address gone, a NAT entry
	// expired) waits for TCP's retransmissions, about 15 minutes, and
	// the condition or DaemonSet it keeps is not watched meanwhile.
	PingAfter, PingTimeout time.Duration
}

// Client makes routed's requests to the API server.
type Client struct {
	server *url.URL
	http   *http.Client
	cfg    ClientConfig
}

// NewClient checks cc and returns its Client.
func NewClient(cc ClientConfig) (*Client, error) {
	u, err := url.Parse(cc.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: API server %q is not an https:// URL", ErrConfig, cc.Server)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cc.CAData) {
		return nil, fmt.Errorf("%w: no PEM certificate in the API server's CA", ErrConfig)
	}
	if cc.Token == "" && cc.TokenFile == "" {
		return nil, fmt.Errorf("%w: no token to reach the API server with", ErrConfig)
	}
	if cc.UserAgent == "" {
		cc.UserAgent = "routed-node"
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: cmp.Or(cc.PingAfter, 30*time.Second),
			PingTimeout:     cmp.Or(cc.PingTimeout, 15*time.Second),
		},
	}
	return &Client{server: u, http: &http.Client{Transport: tr}, cfg: cc}, nil
}

// inClusterClient is the Client of routed running in a pod: its service
// account's token and CA, the API server at the service address
// (KUBERNETES_SERVICE_HOST/PORT, which a hostNetwork pod and the host
// share).
func inClusterClient() (*Client, string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, "", errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	if _, err := os.Stat(saTokenFile); err != nil {
		return nil, "", err
	}
	ca, err := os.ReadFile(saCAFile)
	if err != nil {
		return nil, "", err
	}
	server := "https://" + net.JoinHostPort(host, port)
	c, err := NewClient(ClientConfig{Server: server, CAData: ca, TokenFile: saTokenFile})
	return c, server, err
}

// apiError is an answer other than success: its HTTP status and the
// API's message.
type apiError struct {
	Code    int
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// statusCode is err's HTTP status when the API server answered one.
func statusCode(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// do sends one request (body, when not nil, as JSON) and returns the
// answer's body, or an *apiError for a status other than 2xx.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxBody))
}

// send sends one request and returns the answer when its status is
// 2xx; the caller closes its body. body is sent as JSON, or as it is
// when a rawBody.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	u := *c.server
	u.Path = strings.TrimSuffix(c.server.Path, "/") + path
	u.RawQuery = query.Encode()
	var r io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case rawBody:
		r, ctype = bytes.NewReader(b.data), b.contentType
	default:
		j, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, err
	}
	tok := c.cfg.Token
	if c.cfg.TokenFile != "" {
		b, err := os.ReadFile(c.cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: routed's own token: %w", ErrConfig, err)
		}
		tok = strings.TrimSpace(string(b))
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	var st struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	return nil, &apiError{Code: resp.StatusCode, Message: msg}
}

// objectPath is the REST path of an object of a namespaced resource in
// group/version ("" for the core group), or of the collection when
// name is empty.
func objectPath(group, version, namespace, resource, name string) string {
	p := "/api/" + version
	if group != "" {
		p = "/apis/" + group + "/" + version
	}
	p += "/namespaces/" + url.PathEscape(namespace) + "/" + resource
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}
