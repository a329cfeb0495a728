package datastore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/routed-net/routed/pkg/api"
)

// Sentinel errors; test with errors.Is.
var (
	ErrNotFound = errors.New("datastore: not found")
	ErrExists   = errors.New("datastore: already exists")
	// ErrConflict means the object changed since it was read.
	ErrConflict = errors.New("datastore: conflict: the resource was modified since it was read")
	// ErrUnavailable means etcd could not be reached in time.
	ErrUnavailable = errors.New("datastore: etcd unreachable")
	// ErrConfig means the connection settings are unusable.
	ErrConfig = errors.New("datastore: bad configuration")
)

// ObjectError says which object an error is about, keeping the sentinel
// for errors.Is.
type ObjectError struct {
	Kind api.Kind
	Name string
	Err  error
}

func (e *ObjectError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Kind, e.Name, e.Err)
}

// Unwrap returns the sentinel.
func (e *ObjectError) Unwrap() error { return e.Err }

func objErr(k api.Kind, name string, err error) error {
	return &ObjectError{Kind: k, Name: name, Err: err}
}

// wrap turns a failed etcd call into ErrUnavailable when the cause is a
// dead or unreachable etcd, naming each endpoint and why it failed.
func (c *Client) wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "Unavailable") {
		return fmt.Errorf("%w: %s (%v)", ErrUnavailable, c.probe(), err)
	}
	return err
}

// probe dials each endpoint briefly and describes which are unreachable.
func (c *Client) probe() string {
	var parts []string
	for _, ep := range c.cfg.Endpoints {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		conn, err := net.DialTimeout("tcp", host, 500*time.Millisecond)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", ep, err))
			continue
		}
		conn.Close()
		parts = append(parts, fmt.Sprintf("%s: reachable but did not answer in %s", ep, c.cfg.RequestTimeout))
	}
	return strings.Join(parts, "; ")
}
