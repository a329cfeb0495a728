package ipam

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadHandleWith reads the handle's record together with the caller's
// keys, at one revision in one round trip, and caches the record, so
// that a ReleaseByHandleWith that follows needs no read of it (a CNI DEL
// reads its WorkloadEndpoint this way, while the kernel deletes the
// veth). It returns the keys' values, nil for an absent key. The cached
// record may be stale by the release: the release's transaction compares
// its revision and retries with the current one.
func (c *Client) ReadHandleWith(ctx context.Context, handle string, keys ...string) ([]*mvccpbKV, error) {
	if err := checkName("handle", handle); err != nil {
		return nil, err
	}
	hkey := handleKey(handle)
	ops := []clientv3.Op{clientv3.OpGet(hkey)}
	for _, k := range keys {
		ops = append(ops, clientv3.OpGet(k))
	}
	resp, err := c.readMany(ctx, ops...)
	if err != nil {
		return nil, err
	}
	if _, err := c.storeHandleKV(hkey, firstKV(resp.Responses[0].GetResponseRange().Kvs)); err != nil {
		return nil, err
	}
	out := make([]*mvccpbKV, len(keys))
	for i := range keys {
		out[i] = firstKV(resp.Responses[i+1].GetResponseRange().Kvs)
	}
	return out, nil
}
