package datastore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// ErrFenced means a write was refused because the writer no longer holds
// the election it wrote under (a deposed leader).
var ErrFenced = errors.New("datastore: fenced: this process no longer holds the election")

// Fence conditions writes on an election key still being the one this
// process created: etcd's concurrency.Election gives Key() and Rev()
// after Campaign. A deposed leader's writes then fail with ErrFenced
// instead of racing the new leader.
type Fence struct {
	Key string
	Rev int64
}

// Cmp is the comparison a fenced transaction adds to its If.
func (f Fence) Cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev)
}

// Get reads the fence key in a transaction's Else, for Held.
func (f Fence) Get() clientv3.Op { return clientv3.OpGet(f.Key) }

// Held reports, from the response of f.Get() in a failed transaction,
// whether the fence still held (so the failure was something else).
func (f Fence) Held(r *etcdserverpb.ResponseOp) bool {
	kvs := r.GetResponseRange().GetKvs()
	return len(kvs) == 1 && kvs[0].CreateRevision == f.Rev
}

// DeleteFenced is Delete at resourceVersion, only while fence holds and
// every cmp in also holds (ErrConflict when one does not).
func (c *Client) DeleteFenced(ctx context.Context, k api.Kind, name, resourceVersion string, fence Fence, also ...clientv3.Cmp) error {
	rev, err := parseRev(k, name, resourceVersion)
	if err != nil {
		return err
	}
	return c.writeFenced(ctx, Key(k, name), rev, clientv3.OpDelete(Key(k, name)), fence, objErr(k, name, ErrConflict), objErr(k, name, ErrNotFound), also...)
}

// Absent is a comparison that holds while the resource does not exist.
func Absent(k api.Kind, name string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(Key(k, name)), "=", 0)
}

// PutRawFenced writes value at key when the key is at rev (0: absent),
// only while fence holds. For records that are not resources.
func (c *Client) PutRawFenced(ctx context.Context, key string, rev int64, value string, fence Fence) error {
	return c.writeFenced(ctx, key, rev, clientv3.OpPut(key, value), fence, fmt.Errorf("%w: %s", ErrConflict, key), nil)
}

// DeleteRawFenced deletes key at rev, only while fence holds.
func (c *Client) DeleteRawFenced(ctx context.Context, key string, rev int64, fence Fence) error {
	return c.writeFenced(ctx, key, rev, clientv3.OpDelete(key), fence, fmt.Errorf("%w: %s", ErrConflict, key), nil)
}

func (c *Client) writeFenced(ctx context.Context, key string, rev int64, op clientv3.Op, fence Fence, conflict, notFound error, also ...clientv3.Cmp) error {
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev), fence.Cmp()}, also...)
	resp, err := c.etcd.Txn(ctx).
		If(cmps...).
		Then(op).
		Else(clientv3.OpGet(key, clientv3.WithCountOnly()), fence.Get()).Commit()
	if err != nil {
		return c.wrap(err)
	}
	switch {
	case resp.Succeeded:
		return nil
	case !fence.Held(resp.Responses[1]):
		return ErrFenced
	case notFound != nil && resp.Responses[0].GetResponseRange().Count == 0:
		return notFound
	}
	return conflict
}
