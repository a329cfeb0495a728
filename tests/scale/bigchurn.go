package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// churn is the cluster-wide load on the simulated nodes: pods created
// and deleted at fixed rates on random nodes the way routed-cni's direct
// path does it (IPAM assignment, then the endpoint; the endpoint read and
// deleted, then the addresses released), a policy edit and a pod label
// change on their own periods.
type churn struct {
	ds      *datastore.Client
	ic      *ipam.Client
	sh      *shape
	tracker *setTracker
	// inFlight bounds the pod operations under way (every node's CNI
	// plugin works on its own: at 200 a second and 0.5 s of etcd latency
	// that is 100).
	inFlight int

	mu   sync.Mutex
	rng  *rand.Rand
	live []*simPod // pods that may be deleted (tracked ones never are)
	next int       // next pod number

	policies []api.Resource // what the edits pick from

	restarting atomic.Bool

	created, deleted, createFailed, deleteFailed atomic.Int64
	policyEdits, labelEdits, editFailed          atomic.Int64
	late                                         atomic.Int64
	firstErr                                     atomic.Value
	createLat, deleteLat                         latencies
}

// latencies collects durations (ms) from many goroutines.
type latencies struct {
	mu sync.Mutex
	v  []float64
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.v = append(l.v, ms(d))
	l.mu.Unlock()
}

func (l *latencies) pct(p float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return pct(l.v, p)
}

// run churns until ctx ends; operations under way then finish under
// opCtx (an operation cut short would count as a failure it is not).
func (c *churn) run(ctx, opCtx context.Context, createRate, deleteRate float64, policyEvery, labelEvery time.Duration) {
	ops := make(chan func(context.Context), c.inFlight)
	var wg sync.WaitGroup
	for i := 0; i < c.inFlight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for op := range ops {
				op(opCtx)
			}
		}()
	}
	var sched sync.WaitGroup
	every := func(rate float64, op func(context.Context)) {
		if rate <= 0 {
			return
		}
		sched.Add(1)
		go func() {
			defer sched.Done()
			c.schedule(ctx, time.Duration(float64(time.Second)/rate), ops, op)
		}()
	}
	every(createRate, c.create)
	every(deleteRate, c.delete)
	serial := func(period time.Duration, op func(context.Context)) {
		if period <= 0 {
			return
		}
		sched.Add(1)
		go func() {
			defer sched.Done()
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					op(opCtx)
				}
			}
		}()
	}
	serial(policyEvery, c.editPolicy)
	serial(labelEvery, c.editLabel)
	sched.Wait()
	close(ops)
	wg.Wait()
}

// schedule hands op to the workers every period, on a fixed timetable:
// when every worker is busy the hand-off waits, and that op counts as
// late (the achieved rate is reported from what was done).
func (c *churn) schedule(ctx context.Context, period time.Duration, ops chan<- func(context.Context), op func(context.Context)) {
	next := time.Now()
	for {
		next = next.Add(period)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		select {
		case ops <- op:
			continue
		default:
		}
		c.late.Add(1)
		select {
		case ops <- op:
		case <-ctx.Done():
			return
		}
	}
}

func (c *churn) fail(counter *atomic.Int64, err error) {
	counter.Add(1)
	if !errors.Is(err, context.Canceled) {
		c.firstErr.CompareAndSwap(nil, err)
	}
}

// create starts one pod on a random simulated node.
func (c *churn) create(ctx context.Context) {
	c.mu.Lock()
	g := c.sh.simPods() + c.next
	c.next++
	node := simNodeName(c.rng.IntN(c.sh.simNodes()))
	p := newPod(c.rng, g, c.sh.namespaces, node, c.sh.track)
	c.mu.Unlock()
	start := time.Now()
	var addrs []netip.Addr
	err := datastore.RetryUnavailable(ctx, func() error {
		a, err := c.ic.AutoAssign(ctx, ipam.AssignArgs{Node: node, HandleID: p.handle(), Attrs: ipam.Attributes{Namespace: p.namespace(), Pod: p.name}})
		addrs = a
		return err
	})
	if err == nil && len(addrs) != 1 {
		err = fmt.Errorf("pod %s: %d addresses", p.name, len(addrs))
	}
	if err != nil {
		c.fail(&c.createFailed, fmt.Errorf("assign %s on %s: %w", p.name, node, err))
		return
	}
	p.addr = addrs[0]
	acked := func() {}
	if p.tracked && c.tracker != nil {
		acked = c.tracker.track(p.addr, c.restarting.Load())
	}
	err = datastore.RetryUnavailable(ctx, func() error {
		_, err := c.ds.Create(ctx, p.wep())
		if errors.Is(err, datastore.ErrExists) {
			return nil // our own write whose answer was lost
		}
		return err
	})
	acked()
	if err != nil {
		c.fail(&c.createFailed, fmt.Errorf("endpoint of %s: %w", p.name, err))
		return
	}
	c.createLat.add(time.Since(start))
	c.created.Add(1)
	if !p.tracked {
		c.mu.Lock()
		c.live = append(c.live, p)
		c.mu.Unlock()
	}
}

// delete removes one random pod: its endpoint, then its addresses.
func (c *churn) delete(ctx context.Context) {
	c.mu.Lock()
	if len(c.live) == 0 {
		c.mu.Unlock()
		return
	}
	k := c.rng.IntN(len(c.live))
	p := c.live[k]
	c.live[k] = c.live[len(c.live)-1]
	c.live = c.live[:len(c.live)-1]
	c.mu.Unlock()
	start := time.Now()
	err := datastore.RetryUnavailable(ctx, func() error {
		// A label change between the read and the delete: read again.
		for range 3 {
			err := c.ds.Delete(ctx, api.KindWorkloadEndpoint, p.wepName(), "")
			if datastore.IsNotFound(err) {
				return nil
			}
			if !errors.Is(err, datastore.ErrConflict) {
				return err
			}
		}
		return fmt.Errorf("endpoint %s: changed under every delete", p.wepName())
	})
	if err == nil {
		err = datastore.RetryUnavailable(ctx, func() error {
			_, err := c.ic.ReleaseByHandle(ctx, p.handle())
			return err
		})
	}
	if err != nil {
		c.fail(&c.deleteFailed, fmt.Errorf("delete %s: %w", p.name, err))
		return
	}
	c.deleteLat.add(time.Since(start))
	c.deleted.Add(1)
}

// editPolicy changes one random policy: a port of its first ingress
// rule, as an operator's edit would.
func (c *churn) editPolicy(ctx context.Context) {
	if len(c.policies) == 0 {
		return
	}
	c.mu.Lock()
	r := c.policies[c.rng.IntN(len(c.policies))]
	port := uint16(20000 + c.rng.IntN(10000))
	c.mu.Unlock()
	err := datastore.RetryUnavailable(ctx, func() error {
		cur, err := c.ds.Get(ctx, r.GetKind(), api.StoreName(r))
		if err != nil {
			return err
		}
		spec := cur.(api.Policy).Policy()
		if len(spec.Ingress) == 0 {
			spec.Ingress = []api.Rule{{Action: api.ActionAllow}}
		}
		tcp := api.ProtocolFromName(api.ProtocolTCP)
		spec.Ingress[0].Protocol = &tcp
		spec.Ingress[0].Destination.Ports = []api.Port{api.SinglePort(port)}
		_, err = c.ds.Update(ctx, cur)
		return err
	})
	if err != nil {
		c.fail(&c.editFailed, fmt.Errorf("edit policy %s: %w", r.Meta().Name, err))
		return
	}
	c.policyEdits.Add(1)
}

// editLabel moves one random pod to another Deployment's app label (a
// relabel): it leaves some selectors' sets and joins others'.
func (c *churn) editLabel(ctx context.Context) {
	c.mu.Lock()
	if len(c.live) == 0 {
		c.mu.Unlock()
		return
	}
	p := c.live[c.rng.IntN(len(c.live))]
	app := fmt.Sprintf("app-%d", c.rng.IntN(appsPerNamespace))
	c.mu.Unlock()
	err := datastore.RetryUnavailable(ctx, func() error {
		cur, err := c.ds.Get(ctx, api.KindWorkloadEndpoint, p.wepName())
		if err != nil {
			return err
		}
		cur.Meta().Labels["app"] = app
		_, err = c.ds.Update(ctx, cur)
		return err
	})
	if datastore.IsNotFound(err) {
		return // deleted meanwhile
	}
	if err != nil {
		c.fail(&c.editFailed, fmt.Errorf("relabel %s: %w", p.name, err))
		return
	}
	c.labelEdits.Add(1)
}
