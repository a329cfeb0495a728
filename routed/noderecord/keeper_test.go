package noderecord

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

// TestNodeKeeperRecreatesDeletedNode reproduces the fault (a running
// routed never re-registered after its Node record was deleted) and
// checks the fix: the keeper re-creates the record within seconds, each
// time, with its labels, AS number, route-reflector cluster ID and
// tunnel address as they were.
func TestNodeKeeperRecreatesDeletedNode(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := Addresses{V4: netip.MustParsePrefix("10.0.0.9/24"), V6: netip.MustParsePrefix("fd00:10::9/64")}
	if _, err := Register(ctx, ds, "keep", addr); err != nil {
		t.Fatal(err)
	}
	dstest.Apply(t, ds, `apiVersion: routed.io/v1
kind: Node
metadata: {name: keep, labels: {kubernetes.io/hostname: keep, rack: r7}}
spec: {bgp: {ipv4Address: 10.0.0.9/24, ipv6Address: "fd00:10::9/64", asNumber: 64517, routeReflectorClusterID: 224.0.0.9, ipv4IPIPTunnelAddr: 10.54.0.1}}
`)
	want := getNode(t, ds, "keep")

	k := NewKeeper("keep", addr)
	fd := feed.New(ds, feed.Options{})
	fd.Subscribe("keeper", Kinds, k)
	go fd.Run(ctx)
	go k.Run(ctx, ds)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.last == nil || k.last.Spec.BGP.ASNumber != 64517 {
			return "the keeper has not seen the Node with AS 64517"
		}
		return ""
	})

	for i := 0; i < 2; i++ {
		if err := ds.Delete(ctx, api.KindNode, "keep", ""); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var got *api.Node
		testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() string {
			r, err := ds.Get(ctx, api.KindNode, "keep")
			if datastore.IsNotFound(err) {
				return fmt.Sprintf("deletion %d: Node record not re-created", i+1)
			}
			if err != nil {
				t.Fatal(err)
			}
			got = r.(*api.Node)
			return ""
		})
		t.Logf("deletion %d: re-created after %s", i+1, time.Since(start).Round(time.Microsecond))
		if !reflect.DeepEqual(got.Spec, want.Spec) || !reflect.DeepEqual(got.Metadata.Labels, want.Metadata.Labels) {
			t.Fatalf("re-created Node differs:\ngot  %+v %+v\nwant %+v %+v", got.Metadata.Labels, *got.Spec.BGP, want.Metadata.Labels, *want.Spec.BGP)
		}
	}
}

func getNode(t *testing.T, ds *datastore.Client, name string) *api.Node {
	t.Helper()
	r, err := ds.Get(context.Background(), api.KindNode, name)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*api.Node)
}
