package datastore

import (
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/routed-net/routed/pkg/api"
)

// A list reads a big cluster's endpoints in ranges of a few nodes'
// endpoints each, not as one range: etcd counts every key left in a
// range for each page it serves (listPage), so one range of 150,000
// endpoints costs about n²/listPage key visits, a range per 100 nodes a
// fiftieth of that (BenchmarkListCuts: 150,000 endpoints of 1 KiB on a
// quiet etcd in about half the time). The cuts come from the list
// itself: Nodes are listed before endpoints (their keys sort first), and
// an endpoint's name starts with its node's (api.WorkloadEndpointName).
// Cuts are only boundaries: a key between two is read all the same, so
// a cluster whose endpoints are not spread over nodes is read whole,
// only with more requests.

// nodesPerCut is how many Nodes' endpoints one range of the list holds.
var nodesPerCut = 100

var (
	nodesPrefix     = KindPrefix(api.KindNode)
	endpointsPrefix = KindPrefix(api.KindWorkloadEndpoint)
)

// listCuts are the endpoint keys a list cuts its range at.
type listCuts struct {
	nodes  int      // Nodes read so far
	cuts   []string // ascending once sorted
	sorted bool
}

// note takes a page's Nodes: every nodesPerCut-th makes a cut.
func (lc *listCuts) note(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		name, ok := strings.CutPrefix(string(kv.Key), nodesPrefix)
		if !ok || name == "" {
			continue
		}
		lc.nodes++
		if lc.nodes%nodesPerCut == 0 {
			lc.cuts = append(lc.cuts, endpointsPrefix+api.WorkloadEndpointNamePrefix(name))
			lc.sorted = false
		}
	}
}

// end is where a page starting at key ends: end, or the first cut
// after key when one lies before end.
func (lc *listCuts) end(key, end string) string {
	if len(lc.cuts) == 0 {
		return end
	}
	if !lc.sorted {
		slices.Sort(lc.cuts)
		lc.sorted = true
	}
	i, found := slices.BinarySearch(lc.cuts, key)
	if found {
		i++
	}
	if i < len(lc.cuts) && lc.cuts[i] < end {
		return lc.cuts[i]
	}
	return end
}

// bounds are key and every cut after it before end: where the ranges
// left of [key, end) begin.
func (lc *listCuts) bounds(key, end string) []string {
	out := []string{key}
	for c := lc.end(key, end); c != end; c = lc.end(c, end) {
		out = append(out, c)
	}
	return out
}
