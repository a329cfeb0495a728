package datastore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// A list cuts the endpoints' range at every nodesPerCut-th Node's
// endpoints, and reads every key all the same, in order: the keys of a
// node with no endpoints, of an endpoint whose node is not there and
// after the endpoints too. Not parallel: it swaps listPageSize,
// nodesPerCut and readPage.
func TestListCutsEndpointsAtNodes(t *testing.T) {
	c, _ := newTestClient(t)
	var nodes []string
	for i := range 23 {
		n := fmt.Sprintf("node-%02d", i)
		nodes = append(nodes, n)
		put(t, c, Key(api.KindNode, n), "{}")
		for j := range 4 {
			if i == 7 {
				break // a node without endpoints
			}
			put(t, c, Key(api.KindWorkloadEndpoint, api.WorkloadEndpointName(n, "k8s", "ns-a", fmt.Sprintf("pod-%d", j), "", "eth0")), fmt.Sprint(i, j))
		}
	}
	put(t, c, Key(api.KindWorkloadEndpoint, api.WorkloadEndpointName("gone-node", "k8s", "ns", "pod", "", "eth0")), "stray")
	put(t, c, KeyPrefix+"zz/after", "after")
	put(t, c, KeyPrefix+"bgpconfigurations/default", "{}")

	defer func(n, per int) { listPageSize, nodesPerCut, readPage = n, per, (*Client).listPage }(listPageSize, nodesPerCut)
	listPageSize, nodesPerCut = 3, 5
	var mu sync.Mutex
	var ends []string
	readPage = func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		mu.Lock()
		ends = append(ends, end)
		mu.Unlock()
		return c.listPage(ctx, key, end, rev)
	}
	checkListed(t, c)
	// The cuts: every 5th node's endpoints begin a range.
	var cuts []string
	for _, e := range ends {
		if strings.HasPrefix(e, KindPrefix(api.KindWorkloadEndpoint)) && !slices.Contains(cuts, e) {
			cuts = append(cuts, e)
		}
	}
	var wantCuts []string
	for _, n := range []string{nodes[4], nodes[9], nodes[14], nodes[19]} {
		wantCuts = append(wantCuts, KindPrefix(api.KindWorkloadEndpoint)+api.WorkloadEndpointNamePrefix(n))
	}
	slices.Sort(cuts) // ranges are read side by side
	if !slices.Equal(cuts, wantCuts) {
		t.Fatalf("the endpoints' range was cut at %q, want %q", cuts, wantCuts)
	}
}
