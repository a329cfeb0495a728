package datastore

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pages reads every key under prefix, limit keys per request, all at
// revision rev (0: the revision of the first page), and hands each page
// to f before it reads the next. It returns the revision read.
//
// It is for passes over a large range (every endpoint of a cluster) that
// keep only a little of each record: the caller holds one page at a
// time, not the whole range. Every page is read at one revision, so the
// pages together are one snapshot, as a single read would be; a
// revision compacted away meanwhile fails the read. The pages f is given
// are only valid during the call.
func (c *Client) Pages(ctx context.Context, prefix string, rev int64, limit int, f func(kvs []*mvccpb.KeyValue) error) (int64, error) {
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		cctx, cancel := c.Ctx(ctx)
		resp, err := c.etcd.Get(cctx, key, opts...)
		cancel()
		if err != nil {
			return rev, c.wrap(err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if len(resp.Kvs) == 0 {
			return rev, nil
		}
		if err := f(resp.Kvs); err != nil {
			return rev, err
		}
		if !resp.More {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
