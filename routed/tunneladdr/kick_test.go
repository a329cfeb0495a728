package tunneladdr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
)

// counting is the Loop's seam to etcd (Store and IPAM) with a count of
// every call through it: all the Loop can ask of etcd goes through here.
type counting struct {
	ds                        *datastore.Client
	ic                        *ipam.Client
	updates, assigns, release atomic.Int64
}

func (c *counting) Update(ctx context.Context, r api.Resource) (api.Resource, error) {
	c.updates.Add(1)
	return c.ds.Update(ctx, r)
}

func (c *counting) AutoAssign(ctx context.Context, a ipam.AssignArgs) ([]netip.Addr, error) {
	c.assigns.Add(1)
	return c.ic.AutoAssign(ctx, a)
}

func (c *counting) ReleaseByHandle(ctx context.Context, h string) ([]netip.Addr, error) {
	c.release.Add(1)
	return c.ic.ReleaseByHandle(ctx, h)
}

func (c *counting) calls() [3]int64 {
	return [3]int64{c.updates.Load(), c.assigns.Load(), c.release.Load()}
}

// loopHarness runs a feed and a Loop for node n1 on a fresh etcd.
type loopHarness struct {
	t  *testing.T
	ds *datastore.Client
	ic *ipam.Client
	c  *counting
	l  *Loop
}

func startLoop(t *testing.T) *loopHarness {
	t.Helper()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	h := &loopHarness{t: t, ds: ds, ic: ipam.New(ds)}
	h.c = &counting{ds: ds, ic: h.ic}
	fd := feed.New(ds, feed.Options{})
	h.l = New(h.c, h.c, "n1", func() bool { return false })
	fd.Subscribe("tunnel", Kinds, h.l)
	done := make(chan struct{}, 2)
	go func() { _ = fd.Run(ctx); done <- struct{}{} }()
	go func() { _ = h.l.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return h
}

func (h *loopHarness) node() *api.Node {
	h.t.Helper()
	r, err := h.ds.Get(context.Background(), api.KindNode, "n1")
	if err != nil {
		h.t.Fatal(err)
	}
	return r.(*api.Node)
}

// waitNode waits until the Node satisfies ok and the Loop has decided
// from a view at least as new as it (so what it did for it is counted),
// and returns it.
func (h *loopHarness) waitNode(what string, ok func(*api.Node) bool) *api.Node {
	h.t.Helper()
	var n *api.Node
	testenv.Eventually(h.t, 10*time.Second, 20*time.Millisecond, func() string {
		n = h.node()
		if ok(n) && h.l.passed.Load() >= revOf(n) {
			return ""
		}
		return fmt.Sprintf("%s: node spec %+v bgp %+v (loop decided from revision %d, node at %s)", what, n.Spec, *n.Spec.BGP, h.l.passed.Load(), n.Metadata.ResourceVersion)
	})
	return n
}

// waitPassed waits until the Loop has decided from revision rev.
func (h *loopHarness) waitPassed(rev int64) {
	h.t.Helper()
	testenv.Eventually(h.t, 10*time.Second, 20*time.Millisecond, func() string {
		if at := h.l.passed.Load(); at < rev {
			return fmt.Sprintf("the loop never decided from revision %d (at %d)", rev, at)
		}
		return ""
	})
}

// apply writes yaml and returns the revision of its last resource.
func (h *loopHarness) apply(yaml string) int64 {
	h.t.Helper()
	dec, err := api.Decode([]byte(yaml))
	if err != nil {
		h.t.Fatal(err)
	}
	var rev int64
	for _, r := range dec.Resources {
		w, err := h.ds.Apply(context.Background(), r)
		if err != nil {
			h.t.Fatal(err)
		}
		rev, _ = strconv.ParseInt(w.Meta().ResourceVersion, 10, 64)
	}
	return rev
}

// updateNode changes the Node as an operator or another component
// would, and returns the revision written.
func (h *loopHarness) updateNode(change func(*api.Node)) int64 {
	h.t.Helper()
	n := h.node()
	change(n)
	w, err := h.ds.Update(context.Background(), n)
	if err != nil {
		h.t.Fatal(err)
	}
	return revOf(w.(*api.Node))
}

func inPrefix(p string) func(string) bool {
	return func(s string) bool {
		a, err := netip.ParseAddr(s)
		return err == nil && netip.MustParsePrefix(p).Contains(a)
	}
}

// TestTunnelLoopFollowsPoolEvents: the tunnel address follows a pool
// change within seconds, through the shared feed (the loop's own
// re-check is ten minutes away).
func TestTunnelLoopFollowsPoolEvents(t *testing.T) {
	t.Parallel()
	h := startLoop(t)
	h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Always}\n")
	h.waitNode("after an IPIP pool appeared", func(n *api.Node) bool { return inPrefix("10.50.0.0/24")(n.Spec.BGP.IPv4IPIPTunnelAddr) })
	h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Never}\n")
	h.waitNode("after the pool stopped IPIP", func(n *api.Node) bool { return n.Spec.BGP.IPv4IPIPTunnelAddr == "" })
}

// TestTunnelLoopReadsNothingOnAWake: the Loop decides from the Node and
// pools the feed delivered. A wake that changes nothing for the tunnels
// (another label on the Node, a pool without encapsulation) makes no
// call to etcd at all; changes of the pools and of the Node (its labels
// against a pool's nodeSelector, an address wiped by someone else, a
// pool switching encapsulation) still assign, release and record the
// addresses, each with only the calls it needs.
func TestTunnelLoopReadsNothingOnAWake(t *testing.T) {
	t.Parallel()
	h := startLoop(t)
	ipipIn := func(p string) func(*api.Node) bool {
		return func(n *api.Node) bool { return inPrefix(p)(n.Spec.BGP.IPv4IPIPTunnelAddr) }
	}
	h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Always, nodeSelector: all()}\n")
	n := h.waitNode("after an IPIP pool appeared", ipipIn("10.50.0.0/24"))
	tun := n.Spec.BGP.IPv4IPIPTunnelAddr

	// Wakes that change nothing for the tunnels: no call at all.
	before := h.c.calls()
	h.updateNode(func(n *api.Node) { n.Metadata.Labels["rack"] = "a" })
	rev := h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: plain}\nspec: {cidr: 10.60.0.0/24}\n")
	h.waitPassed(rev)
	if got := h.c.calls(); got != before {
		t.Fatalf("a wake that changed nothing for the tunnels made calls to etcd: updates, assigns, releases %v, were %v", got, before)
	}

	// Someone wipes the recorded address: the handle's address comes back.
	before = h.c.calls()
	h.updateNode(func(n *api.Node) { n.Spec.BGP.IPv4IPIPTunnelAddr = "" })
	n = h.waitNode("after the address was wiped", ipipIn("10.50.0.0/24"))
	if got := n.Spec.BGP.IPv4IPIPTunnelAddr; got != tun {
		t.Fatalf("tunnel address %s after the wipe, was %s (the handle holds it)", got, tun)
	}
	if got := h.c.calls(); got != [3]int64{before[0] + 1, before[1] + 1, before[2]} {
		t.Fatalf("restoring the address: updates, assigns, releases %v, were %v; want one assignment and one write", got, before)
	}

	// The pool stops selecting the node (its labels), then does again
	// (the node's labels change).
	h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Always, nodeSelector: rack == 'b'}\n")
	h.waitNode("after the pool stopped selecting the node", func(n *api.Node) bool { return n.Spec.BGP.IPv4IPIPTunnelAddr == "" })
	if _, err := h.ic.IPInfo(context.Background(), netip.MustParseAddr(tun)); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Fatalf("tunnel address %s still allocated after the pool stopped selecting the node: %v", tun, err)
	}
	h.updateNode(func(n *api.Node) { n.Metadata.Labels["rack"] = "b" })
	h.waitNode("after the node's labels matched the pool again", ipipIn("10.50.0.0/24"))

	// The pool switches to VXLAN: the IPIP address goes, a VTEP comes.
	h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, vxlanMode: Always, nodeSelector: rack == 'b'}\n")
	n = h.waitNode("after the pool switched to VXLAN", func(n *api.Node) bool {
		return n.Spec.BGP.IPv4IPIPTunnelAddr == "" && inPrefix("10.50.0.0/24")(n.Spec.IPv4VXLANTunnelAddr)
	})
	if n.Spec.VXLANTunnelMACAddr != felix.VXLANMAC("n1").String() {
		t.Fatalf("VTEP MAC %q, want %s", n.Spec.VXLANTunnelMACAddr, felix.VXLANMAC("n1"))
	}

	// And again: a wake that changes nothing makes no call.
	before = h.c.calls()
	h.waitPassed(h.updateNode(func(n *api.Node) { n.Metadata.Labels["zone"] = "z1" }))
	if got := h.c.calls(); got != before {
		t.Fatalf("a wake that changed nothing for the tunnels made calls to etcd: updates, assigns, releases %v, were %v", got, before)
	}
}

// TestTunnelLoopWritesNothingUntilAddressed: a Node without a BGP address
// gets no tunnel address and costs no call; it gets one as soon as the
// node record keeper gives it its address.
func TestTunnelLoopWritesNothingUntilAddressed(t *testing.T) {
	t.Parallel()
	h := startLoop(t)
	h.apply("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Always}\n")
	n := h.waitNode("after an IPIP pool appeared", func(n *api.Node) bool { return inPrefix("10.50.0.0/24")(n.Spec.BGP.IPv4IPIPTunnelAddr) })
	before := h.c.calls()
	h.waitPassed(h.updateNode(func(n *api.Node) { n.Spec.BGP = nil }))
	if got := h.c.calls(); got != before {
		t.Fatalf("a Node without a BGP address: updates, assigns, releases %v, were %v", got, before)
	}
	h.updateNode(func(m *api.Node) { m.Spec.BGP = &api.NodeBGPSpec{IPv4Address: "10.0.0.5/24"} })
	h.waitNode("after the node got its address back", func(m *api.Node) bool {
		return m.Spec.BGP != nil && m.Spec.BGP.IPv4IPIPTunnelAddr == n.Spec.BGP.IPv4IPIPTunnelAddr
	})
}

func TestTunnelKickFilters(t *testing.T) {
	l := New(nil, nil, "n1", nil)
	pending := func() bool {
		select {
		case <-l.kick:
			return true
		default:
			return false
		}
	}
	node := func(name string) *api.Node {
		n := &api.Node{}
		n.Metadata.Name = name
		return n
	}
	l.OnBatch(feed.Batch{Updates: []feed.Update{{Kind: api.KindNode, Name: "n2", Resource: node("n2")}}})
	if pending() {
		t.Error("another node's change woke the tunnel loop")
	}
	if l.me != nil {
		t.Error("the loop kept another node's Node")
	}
	l.OnBatch(feed.Batch{Updates: []feed.Update{{Kind: api.KindNode, Name: "n1", Resource: node("n1")}}})
	l.OnBatch(feed.Batch{Updates: []feed.Update{{Kind: api.KindIPPool, Name: "p", Resource: &api.IPPool{}}}}) // coalesced
	if !pending() || pending() {
		t.Error("want exactly one pending wake-up after this node's and a pool's change")
	}
	if l.me == nil || len(l.pools) != 1 {
		t.Errorf("kept node %v and %d pools; want n1 and one pool", l.me, len(l.pools))
	}
}
