package noderecord

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// TestKeyPublisher on a real etcd: felix's keys reach the Node's
// status; an apply of the Node without them (an operator's) gets them
// back; a deleted and re-created record (the keeper) gets them back;
// nothing is written while the datastore is held, and the keys follow
// once it is not.
func TestKeyPublisher(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := Addresses{V4: netip.MustParsePrefix("10.0.0.7/24")}
	if _, err := Register(ctx, ds, "wg", addr); err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool
	var refused atomic.Int32 // the publisher asked while held
	p := NewKeyPublisher("wg", func() bool {
		h := held.Load()
		if h {
			refused.Add(1)
		}
		return h
	})
	k := NewKeeper("wg", addr)
	fd := feed.New(ds, feed.Options{})
	fd.Subscribe("keys", Kinds, p)
	fd.Subscribe("keeper", Kinds, k)
	go fd.Run(ctx)
	go p.Run(ctx, ds)
	go k.Run(ctx, ds)
	const k4, k6 = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
	keysAre := func(v4, v6 string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
			r, err := ds.Get(ctx, api.KindNode, "wg")
			if err != nil {
				return "no node yet: " + err.Error()
			}
			if n := r.(*api.Node); n.Status.WireguardPublicKey != v4 || n.Status.WireguardPublicKeyV6 != v6 {
				return "node status " + n.Status.WireguardPublicKey + " / " + n.Status.WireguardPublicKeyV6
			}
			return ""
		})
	}
	p.Publish(k4, k6)
	keysAre(k4, k6)

	dstest.Apply(t, ds, `apiVersion: routed.io/v1
kind: Node
metadata: {name: wg}
spec: {bgp: {ipv4Address: 10.0.0.7/24}}
`)
	keysAre(k4, k6)

	if err := ds.Delete(ctx, api.KindNode, "wg", ""); err != nil {
		t.Fatal(err)
	}
	keysAre(k4, k6)

	// The publisher runs in one goroutine and writes only after the hold
	// says no: once it has asked about a second wake-up, whatever it did
	// about the first (a write included) is done.
	held.Store(true)
	for i := int32(1); i <= 2; i++ {
		p.Publish(k6, "")
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
			if n := refused.Load(); n < i {
				return fmt.Sprintf("the publisher asked the hold %d times about the new keys, want %d", n, i)
			}
			return ""
		})
	}
	if n := getNode(t, ds, "wg"); n.Status.WireguardPublicKey != k4 {
		t.Fatalf("published while the datastore was held: %+v", n.Status)
	}
	held.Store(false)
	p.Publish(k6, "") // the feed's snapshot after a hold wakes it in routed
	keysAre(k6, "")
}
