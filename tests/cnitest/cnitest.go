// Package cnitest holds what the tests that run the CNI plugins as a
// container runtime does (tests/cni, tests/k8s) both need: fresh network
// namespaces for a node's host and its pods, a relay that lets the
// plugins in such a namespace reach the test's etcd or API server on the
// test process's loopback, and reading a CNI error's code.
//
// Everything it makes is removed in t.Cleanup. It is for tests only.
package cnitest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

// NewNetNS makes a fresh, uniquely named, bind-mounted network namespace
// that is removed when the test ends.
func NewNetNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// Code returns the CNI error code of err, or 0 when err is not a CNI
// error.
func Code(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// RandHex returns n random bytes in hex: unique names for nodes, pods
// and containers.
func RandHex(n int) string {
	b := make([]byte, n)
	f, _ := os.Open("/dev/urandom")
	defer f.Close()
	_, _ = io.ReadFull(f, b)
	return fmt.Sprintf("%x", b)
}

// LogTail is the last 15 lines of the file at path (a plugin's log), for
// a failure message.
func LogTail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// CaliLinks lists the interfaces in the namespace in whose name starts
// with cali: the host sides of pods' veths.
func CaliLinks(in ns.NetNS) ([]string, error) {
	var names []string
	err := in.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "cali") {
				names = append(names, l.Attrs().Name)
			}
		}
		return err
	})
	return names, err
}

// Relay is a TCP relay listening on 127.0.0.1 inside a network
// namespace and connecting to a target on the test process's loopback:
// how the plugins in a node's host namespace reach the test's etcd or
// API server. Closing it makes the target unreachable from the node
// (connection refused).
type Relay struct {
	// Addr is the address the relay listens on, inside the namespace.
	Addr string
	ln   net.Listener
	mu   sync.Mutex
	open []net.Conn
	done bool
}

// NewRelay starts a Relay in the namespace in to target; it is closed
// when the test ends.
func NewRelay(t testing.TB, in ns.NetNS, target string) *Relay {
	t.Helper()
	r := &Relay{}
	if err := in.Do(func(ns.NetNS) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		r.ln = ln
		return err
	}); err != nil {
		t.Fatalf("relay listen: %v", err)
	}
	r.Addr = r.ln.Addr().String()
	go r.serve(target)
	t.Cleanup(r.Close)
	return r
}

func (r *Relay) serve(target string) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		// Dialled from an unlocked goroutine: the test process's netns.
		u, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		if r.done {
			r.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		r.open = append(r.open, c, u)
		r.mu.Unlock()
		go pipe(c, u)
		go pipe(u, c)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Close stops listening and cuts every relayed connection. It may be
// called more than once.
func (r *Relay) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	r.ln.Close()
	for _, c := range r.open {
		c.Close()
	}
}
