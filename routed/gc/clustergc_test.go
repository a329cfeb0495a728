package gc

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
)

// TestClusterGCProcessRunsThePass: a process of its own (no node, as
// `routed cluster-gc`), authenticated as the etcd user routed-cluster-gc
// with etcd auth on, wins the election and does the whole cluster-wide
// pass: the endpoints of a deleted node are removed and a leaked address
// is freed. Its role lets it do that and no more: it may not write a
// Node, a Profile or a pool.
func TestClusterGCProcessRunsThePass(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	admin, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	if _, err := admin.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "gone"} {
		if _, err := noderecord.Register(ctx, admin, n, noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
			t.Fatal(err)
		}
	}
	dstest.Apply(t, admin, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.54.0.0/24}\n")
	leaked, err := ipam.New(admin).AutoAssign(ctx, ipam.AssignArgs{Node: "n1", HandleID: "leaked"})
	if err != nil {
		t.Fatal(err)
	}
	wep := api.WorkloadEndpointName("gone", "k8s", "default", "w", "", "eth0")
	dstest.Apply(t, admin, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: "+wep+"}\nspec: {node: gone, containerID: c1, interfaceName: cali1, ipNetworks: [10.54.0.200/32]}\n")
	if err := admin.Delete(ctx, api.KindNode, "gone", ""); err != nil {
		t.Fatal(err)
	}

	pw := map[string]string{"root": "r00t", datastore.RoleClusterGC: "gc-pw"}
	if err := datastore.ApplyRoles(ctx, admin.Etcd(), nil, pw); err != nil {
		t.Fatal(err)
	}
	login := func(user string) *datastore.Client {
		// New authenticates (bcrypt in etcd): give a busy machine room.
		ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints, Username: user, Password: pw[user], DialTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ds.Close() })
		return ds
	}
	root, gcds := login("root"), login(datastore.RoleClusterGC)

	var leading atomic.Bool
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Config{DS: gcds, IPAM: ipam.New(gcds), Cluster: true, Name: "cluster-gc-1",
			Period: 200 * time.Millisecond, Held: NewTrust(runCtx, gcds).Held, Leading: &leading, Metrics: NewMetrics()})
	}()
	t.Cleanup(func() { stop(); <-done })

	deadline := time.Now().Add(60 * time.Second)
	for {
		_, werr := root.Get(ctx, api.KindWorkloadEndpoint, wep)
		held, herr := ipam.New(root).IPsByHandle(ctx, "leaked")
		if datastore.IsNotFound(werr) && herr == nil && len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: endpoint of the deleted node: %v; leaked handle holds %v (%v), want it freed (was %v); leading %v",
				werr, held, herr, leaked, leading.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !leading.Load() {
		t.Fatal("the pass ran but Leading is not set")
	}

	denied := func(err error) bool {
		return errors.Is(err, rpctypes.ErrPermissionDenied) || status.Code(err) == codes.PermissionDenied
	}
	if _, err := gcds.Create(ctx, &api.Profile{Metadata: api.ObjectMeta{Name: "evil"}}); !denied(err) {
		t.Errorf("cluster-gc creating a Profile: want permission denied, got %v", err)
	}
	if _, err := noderecord.Register(ctx, gcds, "evil", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.9/24")}); !denied(err) {
		t.Errorf("cluster-gc writing a Node: want permission denied, got %v", err)
	}
	if _, err := gcds.Create(ctx, &api.IPPool{Metadata: api.ObjectMeta{Name: "evil"}, Spec: api.IPPoolSpec{CIDR: "10.55.0.0/24"}}); !denied(err) {
		t.Errorf("cluster-gc creating an IPPool: want permission denied, got %v", err)
	}
}
