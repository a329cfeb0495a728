package flowagg_test

import (
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// keptNodes posts one batch for each of n nodes, each with a client of
// its own whose connection stays open (kept alive, as a node's sender
// keeps it between batches every 3 s).
func keptNodes(t *testing.T, pki testpki.PKI, a *aggregator, prefix string, n int) {
	t.Helper()
	cert, key := pki.IssueClient(t, "routed-node")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		c := client(t, pki, cert, key)
		t.Cleanup(c.CloseIdleConnections)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			node := fmt.Sprintf("%s-%d", prefix, i)
			code := post(t, c, a.url, batch(node, "b", 1, allowedFlow(80)))
			for try := 0; code == http.StatusServiceUnavailable && try < 100; try++ {
				time.Sleep(20 * time.Millisecond) // the batch slots are taken: a sender retries
				code = post(t, c, a.url, batch(node, "b", 1, allowedFlow(80)))
			}
			if code != http.StatusNoContent {
				errs <- fmt.Errorf("node %s: %d", node, code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestConnsManyNodesKeptAlive: 600 nodes keeping their connections (past
// the 512 connections the aggregator once held in all) leave room for
// one more node and for a reader.
func TestConnsManyNodesKeptAlive(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keptNodes(t, pki, a, "node", 600)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("600 kept connections: heap +%d KiB a connection (server and client side together)", (int64(after.HeapAlloc)-int64(before.HeapAlloc))/600>>10)
	cert, key := pki.IssueClient(t, "routed-node")
	nc := client(t, pki, cert, key)
	nc.Timeout = 5 * time.Second
	if code := post(t, nc, a.url, batch("node-late", "b", 1, allowedFlow(80))); code != http.StatusNoContent {
		t.Fatalf("the 601st node: %d", code)
	}
	rc := client(t, pki, "", "")
	rc.Timeout = 5 * time.Second
	req, _ := http.NewRequest("GET", a.url+"/v1/flows?node=node-late", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := rc.Do(req)
	if err != nil {
		t.Fatalf("a reader with 601 nodes connected: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a reader with 601 nodes connected: %s", resp.Status)
	}
}

// TestConnsPerNodeBounded: one node name holds at most MaxConnsPerNode
// connections (routed-cni's certificate, on every node, may send only
// for a node named routed-cni); other nodes are not held up by it.
func TestConnsPerNodeBounded(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-cni")
	for i := range flowagg.MaxConnsPerNode {
		c := client(t, pki, cert, key)
		t.Cleanup(c.CloseIdleConnections)
		if code := post(t, c, a.url, batch("routed-cni", "b", uint64(i+1))); code != http.StatusNoContent {
			t.Fatalf("routed-cni's connection %d: %d", i+1, code)
		}
	}
	c := client(t, pki, cert, key)
	if code := post(t, c, a.url, batch("routed-cni", "b", 9)); code != http.StatusServiceUnavailable {
		t.Fatalf("routed-cni's connection %d: %d, want 503", flowagg.MaxConnsPerNode+1, code)
	}
	keptNodes(t, pki, a, "node", 3)
}
