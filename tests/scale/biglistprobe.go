package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// listProbe reads every endpoint under churn as a node's list does (pages
// of 5,000 keys at one revision, serializable, the range cut every 100
// Nodes' endpoints), one range at a time and readers ranges at a time,
// alternated twice, so the report compares the two in the same run on
// the same etcd. Each read is printed as it ends.
func listProbe(ctx context.Context, cli *clientv3.Client, readers int) error {
	nodesPrefix := datastore.KindPrefix(api.KindNode)
	epPrefix := datastore.KindPrefix(api.KindWorkloadEndpoint)
	resp, err := cli.Get(ctx, nodesPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	bounds := []string{epPrefix}
	for i, kv := range resp.Kvs {
		if (i+1)%100 == 0 {
			bounds = append(bounds, epPrefix+api.WorkloadEndpointNamePrefix(strings.TrimPrefix(string(kv.Key), nodesPrefix)))
		}
	}
	end := clientv3.GetPrefixRangeEnd(epPrefix)
	for range 2 {
		for _, r := range []int{1, readers} {
			rev, err := cli.Get(ctx, epPrefix, clientv3.WithLimit(1), clientv3.WithKeysOnly())
			if err != nil {
				return err
			}
			t := time.Now()
			keys, err := probeRanges(ctx, cli, bounds, end, rev.Header.Revision, r)
			if err != nil {
				return err
			}
			fmt.Printf("==> list probe under churn: %d endpoints in %d ranges read %d at a time in %s\n", keys, len(bounds), r, time.Since(t).Round(time.Millisecond))
		}
	}
	return nil
}

// probeRanges reads [bounds[i], bounds[i+1]) (the last to end) at rev,
// readers ranges at a time, and counts the keys.
func probeRanges(ctx context.Context, cli *clientv3.Client, bounds []string, end string, rev int64, readers int) (int, error) {
	next := make(chan int, len(bounds))
	for i := range bounds {
		next <- i
	}
	close(next)
	var mu sync.Mutex
	var total int
	var first error
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for i := range next {
				key, hi := bounds[i], end
				if i+1 < len(bounds) {
					hi = bounds[i+1]
				}
				for {
					resp, err := cli.Get(ctx, key, clientv3.WithRange(hi), clientv3.WithLimit(5000), clientv3.WithRev(rev), clientv3.WithSerializable())
					mu.Lock()
					if err != nil && first == nil {
						first = err
					}
					if err == nil {
						total += len(resp.Kvs)
					}
					mu.Unlock()
					if err != nil || !resp.More || len(resp.Kvs) == 0 {
						break
					}
					key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
				}
			}
		})
	}
	wg.Wait()
	return total, first
}
