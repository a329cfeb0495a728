package ipam

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// tracker is the test's own record of who holds which address. A worker
// marks an address released before it asks IPAM to free it and acquired
// after IPAM hands it out, so if two workers ever hold one address at
// once, IPAM handed out an address that was not free.
type tracker struct {
	mu sync.Mutex
	t  *testing.T
	// holder maps an address to the handle of the worker holding it.
	holder map[netip.Addr]string
	// abandoned maps addresses left allocated on purpose (a crashed CNI
	// ADD or DEL) to their handle; GC may free them at any time.
	abandoned map[netip.Addr]string
	// aborted lists handles whose ADD was cut short: a write may land
	// after the abort was noticed, so they may hold unrecorded addresses.
	aborted map[string]bool
}

func (tr *tracker) acquire(handle string, ips []netip.Addr) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, ip := range ips {
		if h, ok := tr.holder[ip]; ok && h != handle {
			tr.t.Errorf("DOUBLE ALLOCATION: %s handed to %s while %s holds it", ip, handle, h)
		}
		if h, ok := tr.abandoned[ip]; ok && h != handle {
			delete(tr.abandoned, ip) // GC freed it: fine
		}
		tr.holder[ip] = handle
	}
}

func (tr *tracker) release(ips []netip.Addr) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, ip := range ips {
		delete(tr.holder, ip)
	}
}

// abandon records that handle keeps ips with nothing using them.
func (tr *tracker) abandon(handle string, ips []netip.Addr) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, ip := range ips {
		if h, ok := tr.holder[ip]; ok && h != handle {
			tr.t.Errorf("DOUBLE ALLOCATION: aborted handle %s holds %s, which %s holds", handle, ip, h)
		}
		delete(tr.holder, ip)
		tr.abandoned[ip] = handle
	}
}

type stressCounts struct {
	allocs, releases, retries, aborts, abandoned, exhausted, contention atomic.Int64
}

// held is a workload a worker created: its handle, addresses and
// endpoint.
type held struct {
	handle, wep string
	ips         []netip.Addr
}

func TestStress(t *testing.T) {
	nodes, workers, ops := 8, 8, 120
	if testing.Short() {
		nodes, workers, ops = 4, 4, 30
	}
	srv := newEnv(t)
	// 64 blocks of 8 for 8 nodes whose workers hold about 30 addresses
	// each: nodes claim, release (empty blocks go after 200ms) and borrow
	// all the time, and now and then find the pool exhausted.
	srv.pool("stress", "10.20.0.0/23", 29)
	srv.ipamConfig(api.IPAMConfigurationSpec{MaxBlocksPerHost: 10})
	for n := range nodes {
		srv.node(fmt.Sprintf("n%d", n), nil)
	}
	endpoints := srv.ds.Endpoints()
	tr := &tracker{t: t, holder: map[netip.Addr]string{}, abandoned: map[netip.Addr]string{}, aborted: map[string]bool{}}
	var cnt stressCounts
	ctx := ctxT(t)

	// A GC runs throughout, as the controller does, with a grace period
	// longer than any ADD takes to write its endpoint.
	gcCtx, stopGC := context.WithCancel(ctx)
	gcDone := make(chan struct{})
	gcClient := New(connect(t, endpoints), WithEmptyBlockGrace(200*time.Millisecond))
	go func() {
		defer close(gcDone)
		for gcCtx.Err() == nil {
			if r, err := gcClient.GC(gcCtx, 3*time.Second); err == nil && len(r.Errors) > 0 && gcCtx.Err() == nil {
				t.Logf("GC step errors (retried next run): %v", r.Errors)
			}
			select {
			case <-gcCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	var liveMu sync.Mutex
	var live []held
	for n := range nodes {
		node := fmt.Sprintf("n%d", n)
		// Two IPAM clients per node: the in-process lock serialises each,
		// the conditional writes arbitrate between them.
		clients := []*Client{New(connect(t, endpoints)), New(connect(t, endpoints))}
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := stressWorker(t, ctx, srv.ds, clients[w%2], tr, &cnt, node, w, ops)
				liveMu.Lock()
				live = append(live, mine...)
				liveMu.Unlock()
			}()
		}
	}
	wg.Wait()
	stopGC()
	<-gcDone

	c := New(srv.ds)
	s, err := c.snapshot(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.inconsistencies() {
		t.Errorf("inconsistent after the run: %s", p)
	}
	// Every allocation belongs to a live workload or to an abandoned one.
	known := map[string]bool{}
	tr.mu.Lock()
	for _, h := range tr.holder {
		known[h] = true
	}
	for _, h := range tr.abandoned {
		known[h] = true
	}
	for h := range tr.aborted {
		known[h] = true
	}
	tr.mu.Unlock()
	for id := range s.derivedHandles() {
		if !known[id] {
			t.Errorf("handle %q holds addresses no worker knows about", id)
		}
	}
	for _, h := range live {
		got, err := c.IPsByHandle(ctx, h.handle)
		if err != nil || !slices.Equal(got, h.ips) {
			t.Errorf("live handle %s holds %v (%v), worker has %v", h.handle, got, err, h.ips)
		}
	}

	// Tear down: delete every workload, then GC everything else away.
	for _, h := range live {
		if err := srv.ds.Delete(ctx, api.KindWorkloadEndpoint, h.wep, ""); err != nil {
			t.Errorf("delete endpoint %s: %v", h.wep, err)
		}
		if _, err := c.ReleaseByHandle(ctx, h.handle); err != nil {
			t.Errorf("release %s: %v", h.handle, err)
		}
	}
	final := New(srv.ds, WithEmptyBlockGrace(0))
	r, err := final.GC(ctx, 0)
	if err != nil || len(r.Errors) > 0 {
		t.Fatalf("final GC: %v %v", err, r.Errors)
	}
	probs, err := final.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("after final GC: %s", p)
	}
	for _, k := range ipamKeysLeft(t, srv.ds) {
		t.Errorf("left behind after releasing everything: %s", k)
	}
	total := cnt.allocs.Load() + cnt.releases.Load()
	t.Logf("%d nodes x %d workers: %d allocations, %d releases, %d idempotent retries, %d aborted, %d abandoned, %d exhausted, %d contention errors; final GC released %d addresses, %d blocks",
		nodes, workers, cnt.allocs.Load(), cnt.releases.Load(), cnt.retries.Load(), cnt.aborts.Load(), cnt.abandoned.Load(),
		cnt.exhausted.Load(), cnt.contention.Load(), len(r.Released), len(r.RemovedBlocks))
	if cnt.contention.Load()*20 > total {
		t.Errorf("%d of %d operations gave up on contention", cnt.contention.Load(), total)
	}
}

// stressWorker allocates and releases workloads on node, like the CNI
// plugin, crashing at random points; it returns the workloads it still
// has at the end.
func stressWorker(t *testing.T, ctx context.Context, ds *datastore.Client, c *Client, tr *tracker, cnt *stressCounts, node string, w, ops int) []held {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(len(node))+uint64(node[len(node)-1])))
	var mine []held
	for i := range ops {
		if ctx.Err() != nil {
			return mine
		}
		switch r := rng.IntN(100); {
		case len(mine) == 0 || (r < 45 && len(mine) < 8):
			handle := fmt.Sprintf("stress.%s-w%d-%d", node, w, i)
			if h, ok := stressAdd(t, ctx, ds, c, tr, cnt, rng, node, handle); ok {
				mine = append(mine, h)
			}
		case r < 90 || len(mine) >= 8:
			k := rng.IntN(len(mine))
			h := mine[k]
			mine = slices.Delete(mine, k, k+1)
			stressDel(t, ctx, ds, c, tr, cnt, rng, h)
		default: // a retried ADD must get the same addresses back
			h := mine[rng.IntN(len(mine))]
			got, err := c.AutoAssign(ctx, AssignArgs{Node: node, HandleID: h.handle})
			if err != nil || !slices.Equal(got, h.ips) {
				t.Errorf("retried ADD of %s got %v (%v), want %v", h.handle, got, err, h.ips)
			}
			cnt.retries.Add(1)
		}
	}
	return mine
}

func stressAdd(t *testing.T, ctx context.Context, ds *datastore.Client, c *Client, tr *tracker, cnt *stressCounts, rng *rand.Rand, node, handle string) (held, bool) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if rng.IntN(10) == 0 { // the plugin is killed part way through
		time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
	}
	ips, err := c.AutoAssign(actx, AssignArgs{Node: node, HandleID: handle, Attrs: Attributes{Namespace: "stress", Pod: handle}})
	switch {
	case err == nil:
	case errors.Is(err, ErrExhausted):
		cnt.exhausted.Add(1)
		return held{}, false
	case errors.Is(err, ErrContention):
		cnt.contention.Add(1)
		return held{}, false
	case actx.Err() != nil:
		// Whatever the aborted ADD managed to allocate is now orphaned.
		cnt.aborts.Add(1)
		got, err := c.IPsByHandle(ctx, handle)
		if err != nil {
			t.Errorf("IPsByHandle after abort: %v", err)
			return held{}, false
		}
		tr.abandon(handle, got)
		tr.mu.Lock()
		tr.aborted[handle] = true
		tr.mu.Unlock()
		return held{}, false
	default:
		t.Errorf("AutoAssign(%s): %v", handle, err)
		return held{}, false
	}
	cnt.allocs.Add(1)
	tr.acquire(handle, ips)
	if rng.IntN(20) == 0 { // crash between allocating and writing the endpoint
		cnt.abandoned.Add(1)
		tr.abandon(handle, ips)
		return held{}, false
	}
	pod := strings.ReplaceAll(handle, ".", "-")
	name := api.WorkloadEndpointName(node, "k8s", "stress", pod, "", "eth0")
	nets := make([]string, len(ips))
	for i, ip := range ips {
		nets[i] = netip.PrefixFrom(ip, 32).String()
	}
	_, err = ds.Create(ctx, &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: name},
		Spec: api.WorkloadEndpointSpec{Node: node, Namespace: "stress", Pod: pod, ContainerID: handle,
			InterfaceName: "cali0", IPNetworks: nets, Handle: handle},
	})
	if err != nil {
		t.Errorf("create endpoint: %v", err)
	}
	return held{handle: handle, wep: name, ips: ips}, true
}

func stressDel(t *testing.T, ctx context.Context, ds *datastore.Client, c *Client, tr *tracker, cnt *stressCounts, rng *rand.Rand, h held) {
	if err := ds.Delete(ctx, api.KindWorkloadEndpoint, h.wep, ""); err != nil {
		t.Errorf("delete endpoint: %v", err)
	}
	if rng.IntN(20) == 0 { // crash after removing the endpoint, before releasing
		cnt.abandoned.Add(1)
		tr.abandon(h.handle, h.ips)
		return
	}
	tr.release(h.ips)
	if _, err := c.ReleaseByHandle(ctx, h.handle); err != nil {
		if errors.Is(err, ErrContention) {
			cnt.contention.Add(1)
			tr.abandon(h.handle, h.ips) // GC will free them
			return
		}
		t.Errorf("ReleaseByHandle(%s): %v", h.handle, err)
	}
	cnt.releases.Add(1)
}
