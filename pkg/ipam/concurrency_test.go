package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// Two clients (two processes) share a node: each one's cache goes stale
// behind the other's writes, and no answer may come from a stale copy.
func TestStaleCacheAcrossClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.30.0.0/24", 26)
	c1, c2 := New(e.ds), New(e.ds)
	ctx := ctxT(t)

	ip := assign(t, c1, "n1", "h1") // c1 caches the block with h1 holding ip
	if _, err := c2.ReleaseByHandle(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := c1.AssignIP(ctx, ip, "h2", "n1", Attributes{}); err != nil {
		t.Fatalf("AssignIP of an address freed behind the cache: %v", err)
	}
	// Now c1 believes h2 holds ip; c2 frees it. Asking again must really
	// allocate it, not answer "already yours" from the cache.
	if _, err := c2.ReleaseIPs(ctx, Release{IP: ip}); err != nil {
		t.Fatal(err)
	}
	if err := c1.AssignIP(ctx, ip, "h2", "n1", Attributes{}); err != nil {
		t.Fatal(err)
	}
	info, err := c2.IPInfo(ctx, ip)
	if err != nil || info.Handle != "h2" {
		t.Fatalf("after re-assign: %+v %v", info, err)
	}
	// c2 reallocates ip (new sequence); c1's cached copy has the old one.
	if _, err := c2.ReleaseByHandle(ctx, "h2"); err != nil {
		t.Fatal(err)
	}
	if err := c2.AssignIP(ctx, ip, "h3", "n1", Attributes{}); err != nil {
		t.Fatal(err)
	}
	info, _ = c2.IPInfo(ctx, ip)
	if freed, err := c1.ReleaseIPs(ctx, Release{IP: ip, Seq: info.Seq}); err != nil || len(freed) != 1 {
		t.Fatalf("release with the current sequence through a stale client = %v, %v", freed, err)
	}
	// Both clients allocate for n1 from the same block: no duplicates.
	seen := map[netip.Addr]string{}
	for i := range 40 {
		c := []*Client{c1, c2}[i%2]
		h := fmt.Sprintf("x%d", i)
		got := assign(t, c, "n1", h)
		if prev, dup := seen[got]; dup {
			t.Fatalf("%s given to %s and %s", got, prev, h)
		}
		seen[got] = h
	}
	mustVerify(t, c1)
}

// Processes claiming blocks for one node at the same moment must not
// exceed maxBlocksPerHost between them.
func TestConcurrentClaimsRespectCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.31.0.0/24", 28) // 16 blocks of 16
	e.ipamConfig(api.IPAMConfigurationSpec{MaxBlocksPerHost: 2})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[netip.Addr]bool{}
	for w := range 8 {
		c := New(connect(t, e.ds.Endpoints())) // one process each: no shared lock
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				ips, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n1", HandleID: fmt.Sprintf("w%d-%d", w, i)})
				if errors.Is(err, ErrExhausted) || errors.Is(err, ErrContention) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, ip := range ips {
					if got[ip] {
						t.Errorf("%s allocated twice", ip)
					}
					got[ip] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c := New(e.ds)
	blocks, err := c.BlocksForNode(ctxT(t), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) > 2 {
		t.Fatalf("n1 holds %d blocks with maxBlocksPerHost 2: %+v", len(blocks), blocks)
	}
	if len(got) != 32 {
		t.Fatalf("%d addresses allocated, want the 32 of two blocks", len(got))
	}
	mustVerify(t, c)
}
