package flowagg_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/procmem"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// postBody posts body as a batch of node and returns the status.
func postBody(t *testing.T, c *http.Client, url, node string, body io.Reader) int {
	t.Helper()
	resp, err := c.Post(url+"/v1/nodes/"+node+"/batches", "application/json", body)
	if err != nil {
		t.Fatalf("posting node %s's batch: %v", node, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// emptyFlows is a batch of n flows written as {} (3 bytes each, the
// cheapest flow to send).
func emptyFlows(node string, n int) string {
	return fmt.Sprintf(`{"node":%q,"boot":"b","seq":1,"flows":[%s{}]}`, node, strings.Repeat("{},", n-1))
}

// TestBatchIdentityCheckedBeforeBody: a node's certificate sending
// another node's batch is refused before the aggregator reads the body:
// the 403 arrives while the body is still being written.
func TestBatchIdentityCheckedBeforeBody(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	own, ownKey := pki.IssueClient(t, "node-b")
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() { _, _ = pw.Write([]byte(`{"node":"node-a","flows":[{}`)) }() // and never ends
	done := make(chan int, 1)
	go func() { done <- postBody(t, client(t, pki, own, ownKey), a.url, "node-a", pr) }()
	select {
	case code := <-done:
		if code != http.StatusForbidden {
			t.Errorf("node-b's certificate sending node-a's batch: %d, want 403", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer while the body was still open: the aggregator read the body before checking the identity")
	}
	for _, bad := range []string{"Node-A", "node_a", "x%0Ay", strings.Repeat("a", 254)} {
		if code := postBody(t, client(t, pki, own, ownKey), a.url, bad, strings.NewReader("{}")); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("node name %q: %d, want 400", bad, code)
		}
	}
}

// TestBatchFlowCap: a batch of MaxBatchFlows flows is taken, one more
// is refused with 413 (decoding stops there: {} costs 3 bytes to send
// and a whole Flow to hold), and so is a body past MaxBatchBytes; a
// batch whose node differs from the path's is refused.
func TestBatchFlowCap(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	c := client(t, pki, cert, key)
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(emptyFlows("node-a", flowagg.MaxBatchFlows))); code != http.StatusNoContent {
		t.Errorf("a batch of MaxBatchFlows flows: %d, want 204", code)
	}
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(emptyFlows("node-a", flowagg.MaxBatchFlows+1))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a batch of MaxBatchFlows+1 flows: %d, want 413", code)
	}
	huge := fmt.Sprintf(`{"node":"node-a","boot":"b","seq":2,"flows":[{"proto":"%s"}]}`, strings.Repeat("x", flowagg.MaxBatchBytes))
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(huge)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body past MaxBatchBytes: %d, want 413", code)
	}
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(emptyFlows("node-c", 1))); code != http.StatusBadRequest {
		t.Errorf("a batch of node-c posted as node-a's: %d, want 400", code)
	}
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(`{"node":"node-a","boot":"b","seq":3,"extra":1}`)); code != http.StatusBadRequest {
		t.Errorf("a batch with an unknown field: %d, want 400", code)
	}
	if n, _ := a.srv.Window().Stats(); n != 1+flowagg.MaxBatchFlows {
		t.Errorf("the window holds %d entries, want the start gap and %d flows", n, flowagg.MaxBatchFlows)
	}
}

// TestBatchConcurrencyBounded: while MaxConcurrentBatches batch
// requests are being read, one more is answered 503 at once; when they
// end, batches are taken again.
func TestBatchConcurrencyBounded(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	var nodes []string
	for i := range flowagg.MaxConcurrentBatches {
		nodes = append(nodes, fmt.Sprintf("node-%d", i)) // one batch a node is taken at once
	}
	done, end := stallBodies(t, pki, a, cert, key, nodes)
	c := client(t, pki, cert, key)
	// The open requests first: a probe sent while they still arrive
	// takes a slot itself and one of them is refused (seen under load:
	// three held, every probe taken for 10 s).
	testenv.Eventually(t, 8*time.Second, 20*time.Millisecond, func() string {
		if n := a.srv.BatchesInFlight(); n != flowagg.MaxConcurrentBatches {
			return fmt.Sprintf("%d of the %d open batch requests are being read", n, flowagg.MaxConcurrentBatches)
		}
		return ""
	})
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(emptyFlows("node-a", 1))); code != http.StatusServiceUnavailable {
		t.Fatalf("with %d batch requests open, one more: %d, want 503", flowagg.MaxConcurrentBatches, code)
	}
	end() // the open batches end (malformed): their slots free
	for range flowagg.MaxConcurrentBatches {
		<-done
	}
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(emptyFlows("node-a", 1))); code != http.StatusNoContent {
		t.Errorf("after the open batches ended: %d, want 204", code)
	}
}

// TestBatchDropReasonsKnown: a batch's dropped counts may name only the
// node's drop reasons: the gap entry stays small.
func TestBatchDropReasonsKnown(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	c := client(t, pki, cert, key)
	bad := fmt.Sprintf(`{"node":"node-a","boot":"b","seq":1,"dropped":{%q:1}}`, strings.Repeat("k", 1000))
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(bad)); code != http.StatusBadRequest {
		t.Errorf("an unknown drop reason: %d, want 400", code)
	}
	good := `{"node":"node-a","boot":"b","seq":1,"dropped":{"group-cap":3,"nflog-overrun":1}}`
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(good)); code != http.StatusNoContent {
		t.Errorf("known drop reasons: %d, want 204", code)
	}
}

// TestBatchOfEmptyFlowsHeapBounded: the review's amplification, a
// 4 MiB body of {} flows (3 bytes each on the wire, a whole Flow
// decoded), is refused at MaxBatchFlows: the aggregator's heap grows by
// a few MB while it is read, not the gigabytes it took when the whole
// body was decoded first.
func TestBatchOfEmptyFlowsHeapBounded(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	c := client(t, pki, cert, key)
	body := emptyFlows("node-a", (4<<20)/3)
	var code int
	peak, _ := procmem.HeapDuring(func() { code = postBody(t, c, a.url, "node-a", strings.NewReader(body)) })
	t.Logf("a %d-byte body of {} flows: %d, the process's heap peaked %.1f MB above its start", len(body), code, float64(peak)/(1<<20))
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 4 MiB body of {} flows: %d, want 413", code)
	}
	if peak > 64<<20 {
		t.Errorf("the heap peaked %d MB above its start while refusing it, want under 64", peak>>20)
	}
}
