package datastore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// The tests here swap listPageSize, nodesPerCut, listAheadBytes and
// readPage: not parallel.

// putCluster writes nodes Nodes with per endpoints each, and a key after
// the endpoints.
func putCluster(t *testing.T, c *Client, nodes, per int) {
	t.Helper()
	for i := range nodes {
		n := fmt.Sprintf("node-%02d", i)
		var ops []clientv3.Op
		ops = append(ops, clientv3.OpPut(Key(api.KindNode, n), "{}"))
		for j := range per {
			name := api.WorkloadEndpointName(n, "k8s", "ns-a", fmt.Sprintf("pod-%d", j), "", "eth0")
			ops = append(ops, clientv3.OpPut(Key(api.KindWorkloadEndpoint, name), fmt.Sprint(i, "/", j)))
		}
		if _, err := c.etcd.Txn(testCtx(t)).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put(t, c, KeyPrefix+"zz/after", "after")
}

// swapListing sets the list's page size, cut and read-ahead bound and a
// readPage for the test, and puts them back after.
func swapListing(t *testing.T, page, per, ahead int, read func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error)) {
	oldPage, oldPer, oldAhead, oldRead := listPageSize, nodesPerCut, listAheadBytes, readPage
	t.Cleanup(func() { listPageSize, nodesPerCut, listAheadBytes, readPage = oldPage, oldPer, oldAhead, oldRead })
	listPageSize, nodesPerCut, listAheadBytes = page, per, ahead
	if read != nil {
		readPage = read
	}
}

// checkListed fails unless the list read every key under KeyPrefix, in
// etcd's order, with etcd's values.
func checkListed(t *testing.T, c *Client) {
	t.Helper()
	got, _, _, err := c.listRanges(testCtx(t), KeyPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.etcd.Get(testCtx(t), KeyPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.Kvs) {
		t.Fatalf("listed %d keys, etcd holds %d", len(got), len(want.Kvs))
	}
	for i, kv := range want.Kvs {
		if string(got[i].Key) != string(kv.Key) || string(got[i].Value) != string(kv.Value) {
			t.Fatalf("key %d: listed %s=%s, etcd has %s=%s", i, got[i].Key, got[i].Value, kv.Key, kv.Value)
		}
	}
}

// A list reads the endpoints' ranges listReaders at a time, and hands
// every key on in order all the same.
func TestListReadsRangesSideBySide(t *testing.T) {
	c, _ := newTestClient(t)
	putCluster(t, c, 23, 4)
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	inFlight, most, reached, timedOut := 0, 0, false, false
	swapListing(t, 3, 2, listAheadBytes, func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		if strings.HasPrefix(key, endpointsPrefix) {
			// Hold each read until listReaders are in flight at once
			// (the first time only; 10 s at most).
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if inFlight >= listReaders {
				reached = true
				cond.Broadcast()
			}
			timer := time.AfterFunc(10*time.Second, func() {
				mu.Lock()
				timedOut = true
				cond.Broadcast()
				mu.Unlock()
			})
			for !reached && !timedOut {
				cond.Wait()
			}
			timer.Stop()
			mu.Unlock()
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		}
		return c.listPage(ctx, key, end, rev)
	})
	checkListed(t, c)
	if !reached {
		t.Fatalf("at most %d reads of the endpoints were in flight at once, want %d", most, listReaders)
	}
}

// The tightest bound on what is read ahead (a reader ahead waits for
// everything held to be handed on) still reads every key, in order.
func TestListAheadBoundStillReadsAll(t *testing.T) {
	c, _ := newTestClient(t)
	putCluster(t, c, 23, 4)
	swapListing(t, 3, 2, 1, nil)
	checkListed(t, c)
}

// A range that fails fails the list with its error, also while an
// earlier range is still being handed on, and every reader returns.
func TestListAheadFailureFailsList(t *testing.T) {
	c, _ := newTestClient(t)
	putCluster(t, c, 23, 4)
	boom := errors.New("page lost")
	late := endpointsPrefix + api.WorkloadEndpointNamePrefix("node-16")
	swapListing(t, 3, 2, listAheadBytes, func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		if key >= late && strings.HasPrefix(key, endpointsPrefix) {
			return nil, boom
		}
		return c.listPage(ctx, key, end, rev)
	})
	_, _, _, err := c.listRanges(testCtx(t), KeyPrefix, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("the list returned %v, want %v", err, boom)
	}
}

// A list given up part way (its context ended) stops its readers: close
// waits for them.
func TestListAheadStopsWithItsContext(t *testing.T) {
	c, _ := newTestClient(t)
	putCluster(t, c, 23, 4)
	ctx, cancel := context.WithCancel(testCtx(t))
	swapListing(t, 3, 2, listAheadBytes, func(c *Client, rctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		if strings.HasPrefix(key, endpointsPrefix+api.WorkloadEndpointNamePrefix("node-10")) {
			cancel()
			<-rctx.Done()
			return nil, rctx.Err()
		}
		return c.listPage(rctx, key, end, rev)
	})
	_, _, _, err := c.listRanges(ctx, KeyPrefix, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the list returned %v, want %v", err, context.Canceled)
	}
}
