package datastore

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestNoLostUpdates runs read-modify-write increments of one label from
// many goroutines, each retrying on ErrConflict. Optimistic concurrency
// must make the final count equal the number of successful updates.
func TestNoLostUpdates(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	if _, err := c.Create(ctx, newNode("counter", map[string]string{"count": "0"})); err != nil {
		t.Fatal(err)
	}

	const writers, each = 8, 15
	var succeeded, conflicts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				for {
					r, err := c.Get(ctx, api.KindNode, "counter")
					if err != nil {
						errs <- err
						return
					}
					n, err := strconv.Atoi(r.Meta().Labels["count"])
					if err != nil {
						errs <- err
						return
					}
					r.Meta().Labels["count"] = strconv.Itoa(n + 1)
					_, err = c.Update(ctx, r)
					if errors.Is(err, ErrConflict) {
						conflicts.Add(1)
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					succeeded.Add(1)
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer failed: %v", err)
	}

	r, err := c.Get(ctx, api.KindNode, "counter")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := strconv.Atoi(r.Meta().Labels["count"])
	if int64(got) != succeeded.Load() || got != writers*each {
		t.Fatalf("count = %d, successful updates = %d, want %d: an update was lost", got, succeeded.Load(), writers*each)
	}
	t.Logf("%d increments, %d conflicts retried", got, conflicts.Load())
}

// TestConcurrentOverlappingPools creates pools that all overlap each
// other from many goroutines at once: exactly one may win, and the others
// must fail with ErrInvalid (saw the winner) or ErrConflict (raced it).
func TestConcurrentOverlappingPools(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	cidrs := []string{"10.0.0.0/8", "10.9.0.0/16", "10.9.0.0/16", "10.9.1.0/24", "10.9.1.0/26", "10.9.0.0/12", "10.9.1.0/24", "10.0.0.0/9"}
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		results := make([]error, len(cidrs))
		start := make(chan struct{})
		for i, cidr := range cidrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, results[i] = c.Create(ctx, newPool(fmt.Sprintf("r%d-p%d", round, i), cidr))
			}()
		}
		close(start)
		wg.Wait()

		winners := 0
		for i, err := range results {
			switch {
			case err == nil:
				winners++
			case errors.Is(err, api.ErrInvalid), errors.Is(err, ErrConflict):
			default:
				t.Fatalf("round %d pool %d (%s): unexpected error %v", round, i, cidrs[i], err)
			}
		}
		list, _, err := c.List(ctx, api.KindIPPool)
		if err != nil {
			t.Fatal(err)
		}
		if winners != 1 || len(list) != 1 {
			t.Fatalf("round %d: %d creates succeeded and %d pools stored, want exactly 1: %v", round, winners, len(list), results)
		}
		if err := c.Delete(ctx, api.KindIPPool, list[0].Meta().Name, ""); err != nil {
			t.Fatal(err)
		}
	}
}
