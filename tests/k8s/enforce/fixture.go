package enforce

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ServerPort is where the fixture's servers listen.
const ServerPort = 8080

// Fixture is a namespace with a server pod and a client pod on each
// node. The servers are labelled app=server; clients role=client.
// Every client probes every server, so each verdict is checked on both
// nodes, locally and across the network.
type Fixture struct {
	NS      string
	Servers []*corev1.Pod
	Clients []*corev1.Pod
	netns   map[string]*NetNS
	cleanup []func()
}

// NewFixture creates the namespace ns and its pods, waits until they
// run, and listens in each server's namespace until ctx ends. Call
// Close when done; on error it has removed what it made.
func (e *Env) NewFixture(ctx context.Context, ns string) (*Fixture, error) {
	return e.fixture(ctx, ns, true)
}

// NewClients is NewFixture with the client pods only (probe sources for
// PodStart).
func (e *Env) NewClients(ctx context.Context, ns string) (*Fixture, error) {
	return e.fixture(ctx, ns, false)
}

func (e *Env) fixture(ctx context.Context, ns string, servers bool) (*Fixture, error) {
	f, err := e.newFixture(ctx, ns, servers)
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (e *Env) newFixture(ctx context.Context, ns string, servers bool) (*Fixture, error) {
	f := &Fixture{NS: ns, netns: map[string]*NetNS{}}
	del, err := e.Namespace(ctx, ns, map[string]string{"enforce": ns})
	f.cleanup = append(f.cleanup, del)
	if err != nil {
		return f, err
	}
	var specs []PodSpec
	for i, n := range e.C.Nodes {
		if servers {
			specs = append(specs, PodSpec{NS: ns, Name: fmt.Sprintf("server-%d", i+1), Node: n.Name, Labels: map[string]string{"app": "server"}})
		}
		specs = append(specs, PodSpec{NS: ns, Name: fmt.Sprintf("client-%d", i+1), Node: n.Name, Labels: map[string]string{"role": "client"}})
	}
	for _, s := range specs {
		if _, err := e.Pod(ctx, s); err != nil {
			return f, err
		}
	}
	for _, s := range specs {
		p, err := e.Running(ctx, s.NS, s.Name, 3*time.Minute)
		if err != nil {
			return f, err
		}
		h, err := e.PodNetNS(ctx, p)
		if err != nil {
			return f, err
		}
		f.netns[p.Name] = h
		f.cleanup = append(f.cleanup, h.Close)
		if p.Labels["app"] == "server" {
			f.Servers = append(f.Servers, p)
			if err := Listen(ctx, h, ServerPort); err != nil {
				return f, err
			}
		} else {
			f.Clients = append(f.Clients, p)
		}
	}
	return f, nil
}

// Close deletes the namespace and closes the namespaces' fds.
func (f *Fixture) Close() {
	for i := len(f.cleanup) - 1; i >= 0; i-- {
		f.cleanup[i]()
	}
}

// Pairs are client -> server for the clients named (all when none).
func (f *Fixture) Pairs(clients ...string) []Pair {
	var out []Pair
	for _, c := range f.Clients {
		if len(clients) > 0 && !contains(clients, c.Name) {
			continue
		}
		for _, s := range f.Servers {
			out = append(out, Pair{Name: c.Name + "->" + s.Name, From: f.netns[c.Name],
				To: netip.AddrPortFrom(netip.MustParseAddr(s.Status.PodIP), ServerPort)})
		}
	}
	return out
}

// NetNS is the open namespace of the fixture's pod name.
func (f *Fixture) NetNS(name string) *NetNS { return f.netns[name] }

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func names(pairs []Pair) []string {
	var out []string
	for _, p := range pairs {
		out = append(out, p.Name)
	}
	return out
}
