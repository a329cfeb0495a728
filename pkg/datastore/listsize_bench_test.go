package datastore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// BenchmarkListLarge times a list of a big cluster's endpoints (150,000
// keys of 1 KiB beside as many handles) at several page sizes, all in
// one run against one etcd.
func BenchmarkListLarge(b *testing.B) {
	const n = 150000
	t0 := time.Now()
	c, val, ctx := benchListClient(b)
	for i := 0; i < n; i += 60 {
		var ops []clientv3.Op
		for j := i; j < min(i+60, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/b/workloadendpoints/node-%04d-k8s-ns-pod-%06d-eth0", j%5000, j), val),
				clientv3.OpPut(fmt.Sprintf("/b/ipam/handles/h-%06d", j), "{}"))
		}
		if _, err := c.etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("wrote %d keys in %v", 2*n, time.Since(t0))
	for _, page := range []int{500, 2000, 5000} {
		listPageSize = page
		t1 := time.Now()
		kvs, _, _, err := c.listRanges(ctx, "/b/", nil)
		whole := time.Since(t1)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		kvs2, _, _, err := c.listRanges(ctx, "/b/", []string{"/b/workloadendpoints/"})
		part := time.Since(t2)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("page %d: whole range %d keys %v; endpoints only %d keys %v", page, len(kvs), whole, len(kvs2), part)
	}
	listPageSize = listPage
}

// BenchmarkListCuts times a list of a big cluster's 5,000 Nodes and
// 150,000 endpoints of 1 KiB, with the endpoints' range cut every
// nodesPerCut nodes (listcuts.go), read one range after another and
// listReaders at a time (listahead.go), against one range, alternated
// three times in one run against one etcd.
func BenchmarkListCuts(b *testing.B) {
	const nodes, per = 5000, 30
	c, val, ctx := benchListClient(b)
	for i := 0; i < nodes; i += 2 {
		var ops []clientv3.Op
		for n := i; n < i+2; n++ {
			node := fmt.Sprintf("node-%04d", n)
			ops = append(ops, clientv3.OpPut(Key(api.KindNode, node), "{}"))
			for j := range per {
				name := api.WorkloadEndpointName(node, "k8s", fmt.Sprintf("ns-%d", j%7), fmt.Sprintf("pod-%d-%d", n, j), "", "eth0")
				ops = append(ops, clientv3.OpPut(Key(api.KindWorkloadEndpoint, name), val))
			}
		}
		if _, err := c.etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	defer func(n, r int) { nodesPerCut, listReaders = n, r }(nodesPerCut, listReaders)
	cut, readers := nodesPerCut, listReaders
	for range 3 {
		for _, v := range []struct {
			name         string
			per, readers int
		}{{"one range", nodes + 1, 1}, {"cut, one reader", cut, 1}, {fmt.Sprintf("cut, %d readers", readers), cut, readers}} {
			nodesPerCut, listReaders = v.per, v.readers
			t0 := time.Now()
			kvs, _, _, err := c.listRanges(ctx, KeyPrefix, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: %d keys in %v", v.name, len(kvs), time.Since(t0).Round(time.Millisecond))
		}
	}
}

// benchListClient is a client of a fresh etcd, an endpoint's value of
// 1 KiB and a context, for the list benchmarks.
func benchListClient(b *testing.B) (*Client, string, context.Context) {
	s := etcdtest.Start(b)
	c, err := New(Config{Endpoints: s.Endpoints})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, strings.Repeat("x", 1024), context.Background()
}
