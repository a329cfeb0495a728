package flowagg_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestBatchStalledBodiesOneNode: a certificate of the CA that may send
// only its own node's batches (routed-cni's, on every node) trickling
// MaxConcurrentBatches bodies holds one batch slot, not all: another
// node's batch is taken meanwhile.
func TestBatchStalledBodiesOneNode(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	ccert, ckey := pki.IssueClient(t, "routed-cni")
	done, _ := stallBodies(t, pki, a, ccert, ckey, slices.Repeat([]string{"routed-cni"}, flowagg.MaxConcurrentBatches))
	// the three refused, or all four held
	refused := 0
	testenv.Eventually(t, 8*time.Second, 20*time.Millisecond, func() string {
		for len(done) > 0 {
			<-done
			refused++
		}
		if a.srv.BatchesInFlight()+refused < flowagg.MaxConcurrentBatches {
			return fmt.Sprintf("%d of routed-cni's %d requests being read, %d answered", a.srv.BatchesInFlight(), flowagg.MaxConcurrentBatches, refused)
		}
		return ""
	})
	ncert, nkey := pki.IssueClient(t, "routed-node")
	c := client(t, pki, ncert, nkey)
	if code := postBody(t, c, a.url, "node-a", strings.NewReader(emptyFlows("node-a", 1))); code != http.StatusNoContent {
		t.Fatalf("with routed-cni's %d bodies stalled, node-a's batch: %d (in flight %d)", flowagg.MaxConcurrentBatches, code, a.srv.BatchesInFlight())
	}
}

// TestBatchStalledBodyCut: a batch body that stops arriving is cut
// after BatchBodyTimeout, not held for the 30 s ReadTimeout.
func TestBatchStalledBodyCut(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	start := time.Now()
	done, _ := stallBodies(t, pki, a, cert, key, []string{"node-a"})
	select {
	case code := <-done:
		t.Logf("stalled body answered %d after %v", code, time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatalf("a stalled batch body was still being read after 20 s (%d in flight)", a.srv.BatchesInFlight())
	}
}

// stallBodies posts a batch for each of nodes, each over a connection
// of its own, whose body stops after its first bytes; each one's status
// goes to done when it is answered; end ends the bodies (malformed).
func stallBodies(t *testing.T, pki testpki.PKI, a *aggregator, cert, key string, nodes []string) (done chan int, end func()) {
	t.Helper()
	var writers []*io.PipeWriter
	done = make(chan int, len(nodes))
	for _, node := range nodes {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		go func() { _, _ = fmt.Fprintf(pw, `{"node":%q,`, node) }()
		c := client(t, pki, cert, key)
		c.Timeout = 0
		go func() { done <- postBody(t, c, a.url, node, pr) }()
	}
	end = func() {
		for _, w := range writers {
			w.Close()
		}
	}
	t.Cleanup(end)
	return done, end
}
