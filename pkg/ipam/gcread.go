package ipam

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Keys per request of the paged reads: a /26 block is up to about 10 KB,
// an endpoint about 1.3 KB, a handle or an affinity a few hundred bytes.
// Smaller pages hold less but cost etcd more: it counts every key left
// in the range for each page (n²/page key visits: see the datastore's
// listPage). Endpoints come 1,000 a page (about 1.3 MB): 2,000 raised
// the pass's peak heap by 8 MiB at 50,000 endpoints (BenchmarkGCHeap).
const (
	blockPage    = 200
	recordPage   = 5000
	endpointPage = 1000
)

// How GC and Check read a big cluster (150,000 endpoints): page by page,
// every page at the revision of the first read, so that the pages are one
// snapshot as the single read they replace was. Blocks, affinities and
// Node records are kept (they grow with nodes and blocks); handle records
// and workload endpoints are not: each page of them is reduced to what
// the check decides with (see joinHandles and scanEndpoints) and
// dropped. The writes GC makes from the snapshot are all conditional on
// the revisions it read, so a record changed since is never overwritten.

// pages hands every record under prefix, at rev, to f, a page at a time.
func (c *Client) pages(ctx context.Context, prefix string, rev int64, limit int, f func(kv *mvccpbKV)) error {
	if err := c.ensureLayout(ctx); err != nil {
		return err
	}
	if c.pageLimit > 0 {
		limit = c.pageLimit
	}
	_, err := c.ds.Pages(ctx, prefix, rev, limit, func(kvs []*mvccpbKV) error {
		c.stats.gets.Add(1)
		for _, kv := range kvs {
			f(kv)
		}
		if c.afterPage != nil {
			c.afterPage(prefix)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ipam: reading %s at revision %d: %w", prefix, rev, err)
	}
	return nil
}

// pagedSnapshot reads the pools, the IPAM configuration, the
// reservations and (with nodes) the Node records in one transaction,
// then every affinity at its revision. It returns the Node records
// undecoded (see addNodes) and leaves the blocks to the caller.
func (c *Client) pagedSnapshot(ctx context.Context, nodes bool) (*snapshot, []*mvccpbKV, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(datastore.KindPrefix(api.KindIPPool), clientv3.WithPrefix()),
		clientv3.OpGet(ipamConfigKey()),
		reservationsOp(),
	}
	if nodes {
		ops = append(ops, clientv3.OpGet(datastore.KindPrefix(api.KindNode), clientv3.WithPrefix()))
	}
	resp, err := c.readMany(ctx, ops...)
	if err != nil {
		return nil, nil, err
	}
	r := resp.Responses
	s := c.newSnapshot(resp.Header.Revision, r[:3])
	if err := c.pages(ctx, affinityPrefix, s.rev, recordPage, func(kv *mvccpbKV) { s.addIPAM(string(kv.Key), kv) }); err != nil {
		return nil, nil, err
	}
	var nodeKVs []*mvccpbKV
	if nodes {
		nodeKVs = r[3].GetResponseRange().Kvs
	}
	return s, nodeKVs, nil
}

// readBlocks reads every block into s, at s's revision, and the
// blocks' summaries: a block stored whole among them (by a routed older
// than layout 2) is noted unreadable.
func (c *Client) readBlocks(ctx context.Context, s *snapshot) error {
	if err := c.pages(ctx, blockPrefix, s.rev, blockPage, func(kv *mvccpbKV) { s.addIPAM(string(kv.Key), kv) }); err != nil {
		return err
	}
	return c.pages(ctx, summaryPrefix, s.rev, recordPage, func(kv *mvccpbKV) { s.addIPAM(string(kv.Key), kv) })
}

// addNodes decodes Node records into s.nodes.
func (s *snapshot) addNodes(kvs []*mvccpbKV) {
	s.nodes = map[string]*api.Node{}
	for _, kv := range kvs {
		n, err := decodeNode(kv.Value)
		if err != nil {
			s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", kv.Key, err))
			continue
		}
		s.nodes[n.Metadata.Name] = n
	}
}

// blocksAndNodes is the snapshot of blocks, affinities, pools and nodes
// that releasing dead nodes' blocks needs: no handles, no endpoints.
func (c *Client) blocksAndNodes(ctx context.Context) (*snapshot, error) {
	s, nodeKVs, err := c.pagedSnapshot(ctx, true)
	if err != nil {
		return nil, err
	}
	if err := c.readBlocks(ctx, s); err != nil {
		return nil, err
	}
	s.addNodes(nodeKVs)
	return s, nil
}

// fullSnapshot is what Check and GC decide from, at one revision:
// blocks, affinities, pools and nodes kept; handle records compared with
// the blocks page by page (joinHandles); endpoints reduced, page by page,
// to marks on the allocations they name (scanEndpoints). Records that
// cannot be decoded are listed in the order one read of everything
// returned them: affinities, blocks, handles, nodes, endpoints.
func (c *Client) fullSnapshot(ctx context.Context) (*snapshot, error) {
	s, nodeKVs, err := c.pagedSnapshot(ctx, true)
	if err != nil {
		return nil, err
	}
	if err := c.readBlocks(ctx, s); err != nil {
		return nil, err
	}
	if err := c.joinHandles(ctx, s); err != nil {
		return nil, err
	}
	s.addNodes(nodeKVs)
	if err := c.scanEndpoints(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}
