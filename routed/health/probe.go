package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Health and metrics listen on loopback unless told otherwise: routed runs
// with hostNetwork, and an address without a host would publish peer IPs
// and errors (readiness) and every metric on all of the node's interfaces.
// Kubernetes probes therefore exec `routed health`, as Calico's do.
const (
	DefaultHealthAddr  = "127.0.0.1:9099"
	DefaultMetricsAddr = "127.0.0.1:9091"
)

// ErrProbe is returned by Probe when routed answers but is not healthy.
var ErrProbe = errors.New("routed health")

// Probe asks the health server at addr (as given to --health-listen) for
// path (/readiness or /liveness). It returns nil on 200 and an error
// carrying the JSON body (each check's reason) otherwise.
func Probe(ctx context.Context, addr, path string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: health address %q: %w", ErrProbe, addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // listening everywhere includes loopback
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProbe, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %w (is routed running with --health-listen %s?)", ErrProbe, path, err, addr)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s: %s: %s", ErrProbe, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
