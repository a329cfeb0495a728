package flowagg

import (
	"sync"
	"time"
)

// BatchBodyTimeout bounds reading one batch's body (8 MiB at most: 0.8
// MB/s; the sender's own timeout is 10 s too), so a body that stops
// arriving holds its batch slot that long, not the ReadTimeout.
const BatchBodyTimeout = 10 * time.Second

// batchNodes are the nodes a batch is being taken of: one at a time
// each (a node's sender sends one at a time), so a certificate that may
// send only its own node's batches (routed-cni's, on every node) holds
// at most one of the MaxConcurrentBatches slots.
type batchNodes struct {
	mu    sync.Mutex
	nodes map[string]bool
}

// take marks node's batch as being taken; false if one is already.
func (b *batchNodes) take(node string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nodes[node] {
		return false
	}
	if b.nodes == nil {
		b.nodes = map[string]bool{}
	}
	b.nodes[node] = true
	return true
}

// give ends take.
func (b *batchNodes) give(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, node)
}
