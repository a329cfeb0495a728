package daemon

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/routed/noderecord"
)

// TestClusterGCReplicasJudgeAll: two routed cluster-gc replicas; the
// datastore becomes another cluster's while one leads. Both hold (the
// standby judges too), and the standby that takes over from the leader
// writes nothing: the endpoint of a node deleted meanwhile stays until
// the datastore is the cluster's again, then it is removed. A held
// replica stays live (/livez).
func TestClusterGCReplicasJudgeAll(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "gone"} {
		if _, err := noderecord.Register(ctx, ds, n, noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
			t.Fatal(err)
		}
	}
	wep := api.WorkloadEndpointName("gone", "k8s", "default", "w", "", "eth0")
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: "+wep+"}\nspec: {node: gone, containerID: c1, interfaceName: cali1, ipNetworks: [10.54.0.200/32]}\n")
	ours, err := ds.Etcd().Get(ctx, datastore.ClusterInfoKey)
	if err != nil {
		t.Fatal(err)
	}

	type replica struct {
		addr string
		stop context.CancelFunc
		done chan struct{} // closed when RunClusterGC returned
	}
	start := func(name string) *replica {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		rctx, stop := context.WithCancel(ctx)
		r := &replica{addr: addr, stop: stop, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			if err := RunClusterGC(rctx, ClusterGCConfig{Datastore: datastore.Config{Endpoints: srv.Endpoints}, Name: name,
				Period: 200 * time.Millisecond, MetricsAddr: addr, LogLevel: "info"}); err != nil {
				t.Errorf("routed cluster-gc %s: %v", name, err)
			}
		}()
		t.Cleanup(func() { stop(); <-r.done })
		return r
	}
	metric := func(r *replica, name string) float64 {
		resp, err := http.Get("http://" + r.addr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return -1
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 60 s: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	a, b := start("gc-a"), start("gc-b")
	var leader, standby *replica
	waitFor("one replica leads, neither held", func() bool {
		la, lb := metric(a, "routed_cluster_gc_leading"), metric(b, "routed_cluster_gc_leading")
		if metric(a, "routed_cluster_gc_held") != 0 || metric(b, "routed_cluster_gc_held") != 0 || la+lb != 1 {
			return false
		}
		leader, standby = a, b
		if lb == 1 {
			leader, standby = b, a
		}
		return true
	})

	if _, err := ds.Etcd().Put(ctx, datastore.ClusterInfoKey, `{"clusterGUID":"another-cluster","datastoreReady":true}`); err != nil {
		t.Fatal(err)
	}
	waitFor("both replicas hold on another cluster's identity", func() bool {
		return metric(a, "routed_cluster_gc_held") == 1 && metric(b, "routed_cluster_gc_held") == 1
	})
	// Held is not dead: the liveness probe's /livez answers 200 on both.
	for _, r := range []*replica{a, b} {
		resp, err := http.Get("http://" + r.addr + "/livez")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/livez of a held replica: %s, want 200", resp.Status)
		}
	}
	if err := ds.Delete(ctx, api.KindNode, "gone", ""); err != nil {
		t.Fatal(err)
	}
	leader.stop()
	<-leader.done
	waitFor("the standby leads", func() bool { return metric(standby, "routed_cluster_gc_leading") == 1 })
	// A guard, not a proof: before the fix the new leader removed the
	// endpoint within a period (200 ms) of taking over.
	time.Sleep(2 * time.Second)
	if _, err := ds.Get(ctx, api.KindWorkloadEndpoint, wep); err != nil {
		t.Fatalf("the new leader wrote on another cluster's datastore: endpoint of the deleted node: %v", err)
	}

	if _, err := ds.Etcd().Put(ctx, datastore.ClusterInfoKey, string(ours.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	waitFor("the endpoint of the deleted node removed once the datastore is the cluster's again", func() bool {
		_, err := ds.Get(ctx, api.KindWorkloadEndpoint, wep)
		return datastore.IsNotFound(err) && metric(standby, "routed_cluster_gc_held") == 0
	})
}
