package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// missingPrefix holds, per node that has endpoints or blocks but no Node
// record, when the GC leader first saw it missing. It lives in etcd so
// that a new leader keeps counting from the same moment.
const missingPrefix = datastore.KeyPrefix + "nodegc/missing/"

type missingRec struct {
	Since time.Time `json:"since"`
}

type missingKV struct {
	since time.Time
	rev   int64
}

// nodeGC reclaims what deleted nodes leave behind (endpoints, then their
// addresses and blocks through IPAM GC), only for nodes absent for the
// whole grace period, counted from when they went missing. Every write
// is fenced by the leader's election.
type nodeGC struct {
	ds    *datastore.Client
	fence datastore.Fence
	grace time.Duration
	now   func() time.Time
	// reclaiming, when set, runs after the pass decided which nodes are
	// gone and before it deletes anything (tests race a node's return).
	reclaiming func(gone map[string]bool)
	// page, when set, is the keys per read of Nodes and endpoints (tests
	// read many pages); 0: nodePage and endpointPage.
	page int
}

// Page sizes of the pass's reads: a page of endpoints is about 1.3 MB.
// Smaller pages hold less but cost etcd more: it counts every key left
// in the range for each page (n²/page key visits: see the datastore's
// listPage).
const (
	nodePage     = 1000
	endpointPage = 1000
)

// suspect is what the pass keeps of an endpoint whose node has no Node
// record: enough to delete it, fenced and conditional, once the node
// counts as gone.
type suspect struct {
	name, node string
	rev        int64
}

// run does one pass and returns the nodes it treated as gone.
//
// Its memory does not grow with the cluster's pods: endpoints are read
// page by page and each is reduced to its node's name, and kept whole
// (name, node, revision) only when its node has no Node record. All
// reads are at the revision of the first page, so together they are
// one snapshot, as one List was. That alone would not make a stale read
// safe; what does is the delete itself: it is conditional on the
// endpoint still being at the revision read and on its node still
// having no Node record, so an endpoint changed or a node re-registered
// since the snapshot is kept.
func (g *nodeGC) run(ctx context.Context) (map[string]bool, error) {
	nodesPage, endpointsPage := nodePage, endpointPage
	if g.page > 0 {
		nodesPage, endpointsPage = g.page, g.page
	}
	live := map[string]bool{}
	rev, err := g.ds.Pages(ctx, datastore.KindPrefix(api.KindNode), 0, nodesPage, func(kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			var n api.Node
			if err := json.Unmarshal(kv.Value, &n); err != nil {
				log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable record")
				continue
			}
			live[n.Metadata.Name] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Nodes something still refers to.
	referred := map[string]bool{}
	var suspects []suspect
	_, err = g.ds.Pages(ctx, datastore.KindPrefix(api.KindWorkloadEndpoint), rev, endpointsPage, func(kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			name, node, ok := endpointNode(kv)
			if !ok {
				continue
			}
			referred[node] = true
			if !live[node] {
				suspects = append(suspects, suspect{name: name, node: node, rev: kv.ModRevision})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	owners, err := ipam.New(g.ds).BlockOwners(ctx, rev)
	if err != nil {
		return nil, err
	}
	for n := range owners {
		referred[n] = true
	}
	missing, err := g.readMissing(ctx)
	if err != nil {
		return nil, err
	}
	now := g.now()
	gone := map[string]bool{}
	for n := range referred {
		if n == "" || live[n] {
			continue
		}
		m, ok := missing[n]
		if !ok {
			err := g.putMissing(ctx, n, now)
			if errors.Is(err, datastore.ErrFenced) {
				return nil, err
			}
			if err == nil {
				log.WithField("node", n).Infof("node is missing; its endpoints and addresses are kept for %s", g.grace)
			}
			continue
		}
		if now.Sub(m.since) >= g.grace {
			gone[n] = true
		}
	}
	// Back, or nothing left to reclaim: forget it.
	for n, m := range missing {
		if live[n] || !referred[n] {
			if err := g.ds.DeleteRawFenced(ctx, missingPrefix+n, m.rev, g.fence); errors.Is(err, datastore.ErrFenced) {
				return nil, err
			}
		}
	}
	if g.reclaiming != nil && len(gone) > 0 {
		g.reclaiming(gone)
	}
	for _, w := range suspects {
		if !gone[w.node] {
			continue
		}
		// Only while the node is still absent: one that re-registered
		// since the read above keeps its endpoints.
		err := g.ds.DeleteFenced(ctx, api.KindWorkloadEndpoint, w.name, strconv.FormatInt(w.rev, 10), g.fence,
			datastore.Absent(api.KindNode, w.node))
		switch {
		case err == nil:
			log.WithFields(map[string]any{"endpoint": w.name, "node": w.node}).Info("removed endpoint of a deleted node")
		case errors.Is(err, datastore.ErrFenced):
			return nil, err
		case errors.Is(err, datastore.ErrConflict):
			delete(gone, w.node) // it came back (or the endpoint changed): not gone after all
			log.WithFields(map[string]any{"endpoint": w.name, "node": w.node}).Info("kept endpoint: its node came back or it changed during GC")
		case datastore.IsNotFound(err):
		case ctx.Err() != nil:
			// Stopped (a deposed leader's context is cancelled, maybe
			// before its fenced write is refused): not a finished pass.
			return nil, fmt.Errorf("gc: node GC stopped: %w", ctx.Err())
		default:
			log.WithError(err).WithField("endpoint", w.name).Warn("could not remove endpoint of a deleted node")
		}
	}
	return gone, nil
}

// endpointNode reads an endpoint record's name and node. A record that
// does not decode is its deleted node's all the same: its node is read
// from its name, which every stored endpoint's starts with. Such a
// record would otherwise stay for ever after its node is gone, and
// with it every node's deny of its addresses (felix fails closed on
// it). ok is false, with a warning, only for a record whose key names
// no node.
func endpointNode(kv *mvccpb.KeyValue) (name, node string, ok bool) {
	_, name, _ = datastore.ParseKey(string(kv.Key))
	// Only its node is decoded: the whole record (labels, ports, ...)
	// cost about 7 KB of allocation an endpoint, 1 GB a pass at
	// 150,000 pods (BenchmarkNodeGCHeap).
	var w struct {
		Spec struct {
			Node string `json:"node"`
		} `json:"spec"`
	}
	err := json.Unmarshal(kv.Value, &w)
	if err == nil && w.Spec.Node != "" {
		return name, w.Spec.Node, name != ""
	}
	if node, ok = api.WorkloadEndpointNode(name); !ok {
		log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping an unreadable endpoint record: its name names no node")
		return "", "", false
	}
	return name, node, true
}

func (g *nodeGC) readMissing(ctx context.Context) (map[string]missingKV, error) {
	cctx, cancel := g.ds.Ctx(ctx)
	defer cancel()
	resp, err := g.ds.Etcd().Get(cctx, missingPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, g.ds.Wrap(err)
	}
	out := map[string]missingKV{}
	for _, kv := range resp.Kvs {
		var rec missingRec
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			log.WithError(err).WithField("key", string(kv.Key)).Warn("unreadable missing-node record; restarting its clock")
			rec.Since = g.now()
		}
		out[strings.TrimPrefix(string(kv.Key), missingPrefix)] = missingKV{since: rec.Since, rev: kv.ModRevision}
	}
	return out, nil
}

func (g *nodeGC) putMissing(ctx context.Context, node string, since time.Time) error {
	b, _ := json.Marshal(missingRec{Since: since.UTC()})
	return g.ds.PutRawFenced(ctx, missingPrefix+node, 0, string(b), g.fence)
}

// clusterGC removes what deleted nodes left, then frees leaks, all under
// the leader's fence.
func clusterGC(ctx context.Context, ds *datastore.Client, fence datastore.Fence, grace time.Duration) *ipam.Report {
	g := &nodeGC{ds: ds, fence: fence, grace: grace, now: time.Now}
	gone, err := g.run(ctx)
	if err != nil {
		log.WithError(err).Warn("node GC failed")
		return nil
	}
	ic := ipam.New(ds, ipam.WithFence(fence), ipam.WithReclaimable(func(n string) bool { return gone[n] }))
	rep, err := ic.GC(ctx, grace)
	if err != nil {
		log.WithError(err).Warn("IPAM GC failed")
		return nil
	}
	if n := len(rep.Released) + len(rep.RemovedBlocks) + len(rep.RemovedAffinities) + len(rep.RemovedHandles); n > 0 {
		log.WithFields(map[string]any{"released": len(rep.Released), "blocks": len(rep.RemovedBlocks)}).Info("IPAM GC cleaned up")
	}
	if rep.Held != "" {
		log.WithField("leaks", len(rep.Leaks)).Warn("IPAM GC freed no pod address: " + rep.Held)
	}
	return rep
}
