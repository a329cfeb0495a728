package datastore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/pkg/api"
)

func newWEP(node, pod string) *api.WorkloadEndpoint {
	return &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(node, "k8s", "default", pod, "", "eth0")},
		Spec: api.WorkloadEndpointSpec{Node: node, ContainerID: "c-" + pod, InterfaceName: "cali" + pod,
			IPNetworks: []string{"10.1.0.1/32"}},
	}
}

// TestSyncEndpointsOfNode: a node's sync carries its own endpoints only,
// not those of a node whose name starts like it, nor IPAM writes.
func TestSyncEndpointsOfNode(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	for _, w := range []*api.WorkloadEndpoint{newWEP("n1", "a"), newWEP("n1-b", "x"), newWEP("n2", "y"), newWEP("n1b", "z")} {
		if _, err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Sync(sctx, []api.Kind{api.KindWorkloadEndpoint, api.KindNode}, rec, EndpointsOf("n1"))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Sync returned %v", err)
		}
	})
	snap := rec.snapshot(t)
	if w := snap.Resources[api.KindWorkloadEndpoint]; len(w) != 1 || w[0].(*api.WorkloadEndpoint).Spec.Node != "n1" {
		t.Fatalf("snapshot endpoints: %v", w)
	}
	// Another node's endpoint and an IPAM write, then one of n1's: the
	// first event must be n1's (same watch range, later revision).
	if _, err := c.Create(ctx, newWEP("n1-b", "x2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Etcd().Put(ctx, KeyPrefix+"ipam/blocks/10.1.0.0-26", "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, newWEP("n1", "b")); err != nil {
		t.Fatal(err)
	}
	if e := rec.event(t); e.Kind != api.KindWorkloadEndpoint || e.Name != api.WorkloadEndpointName("n1", "k8s", "default", "b", "", "eth0") {
		t.Fatalf("first event %v %s, want n1's new endpoint", e.Kind, e.Name)
	}
	// Other kinds still arrive.
	if _, err := c.Create(ctx, newNode("n3", nil)); err != nil {
		t.Fatal(err)
	}
	if e := rec.event(t); e.Kind != api.KindNode || e.Name != "n3" {
		t.Fatalf("event %v %s, want node n3", e.Kind, e.Name)
	}
}

// TestSyncListsInPages: a kind larger than one list page arrives whole.
func TestSyncListsInPages(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	const n = listPage*2 + 7
	for i := 0; i < n; i++ {
		if _, err := c.Create(ctx, newNode(fmt.Sprintf("n%04d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	startSync(t, c, []api.Kind{api.KindNode}, rec)
	if got := len(rec.snapshot(t).Resources[api.KindNode]); got != n {
		t.Fatalf("snapshot has %d nodes, want %d", got, n)
	}
}

type kindsSeen struct{ ch chan string }

func (k *kindsSeen) OnSnapshot(s Snapshot) {
	for kind, rs := range s.Resources {
		k.ch <- fmt.Sprintf("snapshot %s %d", kind, len(rs))
	}
}
func (k *kindsSeen) OnEvent(e Event) { k.ch <- fmt.Sprintf("event %s %s", e.Kind, e.Name) }

// TestFanout: one sync, each consumer sees only its kinds.
func TestFanout(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	if _, err := c.Create(ctx, newPool("p", "10.1.0.0/16")); err != nil {
		t.Fatal(err)
	}
	a, b := &kindsSeen{make(chan string, 100)}, &kindsSeen{make(chan string, 100)}
	f := &Fanout{}
	f.Add([]api.Kind{api.KindIPPool, api.KindNode}, a)
	f.Add([]api.Kind{api.KindNode, api.KindBGPPeer}, b)
	if got := fmt.Sprint(f.Kinds()); got != "[IPPool Node BGPPeer]" {
		t.Errorf("Kinds() = %s", got)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(sctx, c) }()
	t.Cleanup(func() { cancel(); <-done })
	got := func(k *kindsSeen) string {
		select {
		case s := <-k.ch:
			return s
		case <-time.After(20 * time.Second):
			return "nothing"
		}
	}
	want := map[string]bool{"snapshot IPPool 1": true, "snapshot Node 0": true}
	for i := 0; i < 2; i++ {
		if s := got(a); !want[s] {
			t.Errorf("a: %s", s)
		}
	}
	want = map[string]bool{"snapshot BGPPeer 0": true, "snapshot Node 0": true}
	for i := 0; i < 2; i++ {
		if s := got(b); !want[s] {
			t.Errorf("b: %s", s)
		}
	}
	if _, err := c.Create(ctx, &api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{PeerIP: "10.0.0.1", ASNumber: 65001}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, newNode("n1", nil)); err != nil {
		t.Fatal(err)
	}
	// a's next event is the node (the peer is not a's kind); b gets both.
	if s := got(a); s != "event Node n1" {
		t.Errorf("a: %s, want event Node n1", s)
	}
	bs := map[string]bool{got(b): true, got(b): true}
	if !bs["event BGPPeer tor"] || !bs["event Node n1"] {
		t.Errorf("b: %v", bs)
	}
}

// wedgedHandler takes the snapshot and then blocks on the first event,
// as a wedged consumer would.
type wedgedHandler struct{ release chan struct{} }

func (b *wedgedHandler) OnSnapshot(Snapshot) {}
func (b *wedgedHandler) OnEvent(Event)       { <-b.release }

// TestWatchBeatStopsWhenStalled: the sync's heartbeat goes round while
// the watch works and stops when its consumer wedges, which is what the
// daemon's liveness reads.
func TestWatchBeatStopsWhenStalled(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	beat := &heartbeat.Beat{}
	h := &wedgedHandler{release: make(chan struct{})}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Sync(sctx, []api.Kind{api.KindNode}, h, WithBeat(beat)) }()
	t.Cleanup(func() { cancel(); close(h.release); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if age, ok := beat.Age(time.Now()); ok && age < time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch never beat")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.Create(ctx, newNode("n1", nil)); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if age, _ := beat.Age(time.Now()); age > 2*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a wedged consumer did not stop the beat")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
