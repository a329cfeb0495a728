package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// cfxChurn replaces pods of random simulated nodes at a fixed rate, in
// Calico's format: each replacement deletes a pod's WorkloadEndpoint,
// writes a new pod's (another Deployment's, on the same address) and
// the block with the new pod's allocation, in one transaction. It is
// simpler than `scale big`'s churn (bigchurn.go: separate creations and
// deletions through routed's IPAM, policy and label edits): pod writes
// only, the kind felix sees most of.
type cfxChurn struct {
	ds   *datastore.Client
	sh   *shape
	pods [][]*simPod // per simulated node, as loaded; replaced in place

	locks   []sync.Mutex // per simulated node
	mu      sync.Mutex
	rng     *rand.Rand
	next    int
	done    atomic.Int64
	failed  atomic.Int64
	late    atomic.Int64
	firstMu sync.Mutex
	first   error
}

// run replaces rate pods a second until ctx ends, at most inFlight at a
// time: every 10 ms it starts what is due since the start (a ticker
// alone drops ticks on a busy machine); one due with none free is late
// and skipped.
func (c *cfxChurn) run(ctx context.Context, rate float64, inFlight int) {
	c.locks = make([]sync.Mutex, len(c.pods))
	c.next = c.sh.pods
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start, issued := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		for due := int(time.Since(start).Seconds() * rate); issued < due; issued++ {
			select {
			case sem <- struct{}{}:
			default:
				c.late.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := c.replace(context.WithoutCancel(ctx)); err != nil {
					c.failed.Add(1)
					c.firstMu.Lock()
					if c.first == nil {
						c.first = err
					}
					c.firstMu.Unlock()
					return
				}
				c.done.Add(1)
			}()
		}
	}
}

func (c *cfxChurn) replace(ctx context.Context) error {
	c.mu.Lock()
	i := c.rng.IntN(len(c.pods))
	j := c.rng.IntN(len(c.pods[i]))
	g := c.next
	c.next++
	p := newPod(c.rng, g, c.sh.namespaces, simNodeName(i), 0)
	c.mu.Unlock()

	c.locks[i].Lock()
	defer c.locks[i].Unlock()
	old := c.pods[i][j]
	p.addr = old.addr
	bsize := 1 << (32 - c.sh.blockBits)
	kv := map[string]string{}
	if err := calicoResources(kv, p.wep()); err != nil {
		return err
	}
	oldKey, _, err := calicoKV(old.wep())
	if err != nil {
		return err
	}
	c.pods[i][j] = p
	b := j / bsize
	mine := c.pods[i][b*bsize : min(len(c.pods[i]), (b+1)*bsize)]
	calicoBlock(kv, p.node, netip.PrefixFrom(p.addr, c.sh.blockBits).Masked(), mine)
	ops := []clientv3.Op{clientv3.OpDelete(oldKey)}
	for k, v := range kv {
		ops = append(ops, clientv3.OpPut(k, v))
	}
	return datastore.RetryUnavailable(ctx, func() error {
		_, err := c.ds.Etcd().Txn(ctx).Then(ops...).Commit()
		return c.ds.Wrap(err)
	})
}

// churn runs the replacements for -churn and reports them.
func (r *cfxRun) churn(ctx context.Context) (string, error) {
	c := &cfxChurn{ds: r.ds, sh: &r.f.sh, pods: r.pods, rng: rand.New(rand.NewPCG(r.f.seed, 1<<40))}
	cctx, cancel := context.WithTimeout(ctx, r.f.churn)
	defer cancel()
	start := time.Now()
	c.run(cctx, r.f.churnRate, 256)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	took := time.Since(start)
	if n := c.failed.Load(); n > 0 {
		return "", fmt.Errorf("churn: %d of %d pod replacements failed, the first: %w", n, n+c.done.Load(), c.first)
	}
	return fmt.Sprintf("%d pod replacements (a delete and a create each) in %s, %.1f/s, %d skipped with 256 under way",
		c.done.Load(), took.Round(time.Second), float64(c.done.Load())/took.Seconds(), c.late.Load()), nil
}
