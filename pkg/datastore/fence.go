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
// the election it wrote under (a deposed leader), or the cluster identity
// changed since the writer judged the datastore trusted; the error
// wrapping it says which.
var ErrFenced = errors.New("datastore: fenced")

// Fence conditions writes on an election key still being the one this
// process created: etcd's concurrency.Election gives Key() and Rev()
// after Campaign. A deposed leader's writes then fail with ErrFenced
// instead of racing the new leader. A Fence with no Key conditions
// writes on the cluster identity alone (a node's own pass, which holds
// no election).
type Fence struct {
	Key string
	Rev int64
	// Identity, when not 0, is the cluster identity record's
	// ModRevision when the writer judged the datastore trusted
	// (ClusterInfo.ModRevision): writes fail too once the identity
	// changed since, marked not ready for a migration or a restore, or
	// reinitialised, however far into a pass that happens.
	Identity int64
}

// Cmps are the comparisons a fenced transaction adds to its If.
func (f Fence) Cmps() []clientv3.Cmp {
	var cmps []clientv3.Cmp
	if f.Key != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev))
	}
	if f.Identity != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ClusterInfoKey), "=", f.Identity))
	}
	return cmps
}

// Gets read what the fence compares in a transaction's Else, for Check:
// the election key, then the identity record, each when compared.
func (f Fence) Gets() []clientv3.Op {
	var ops []clientv3.Op
	if f.Key != "" {
		ops = append(ops, clientv3.OpGet(f.Key))
	}
	if f.Identity != 0 {
		ops = append(ops, clientv3.OpGet(ClusterInfoKey, clientv3.WithKeysOnly()))
	}
	return ops
}

// Check says, from the responses of f.Gets() in a failed transaction (in
// order), whether the fence broke: an error wrapping ErrFenced that says
// how, or nil when it still held (the failure was something else).
func (f Fence) Check(rs []*etcdserverpb.ResponseOp) error {
	if f.Key != "" {
		kvs := rs[0].GetResponseRange().GetKvs()
		if len(kvs) != 1 || kvs[0].CreateRevision != f.Rev {
			return fmt.Errorf("%w: this process no longer holds the election", ErrFenced)
		}
		rs = rs[1:]
	}
	if f.Identity == 0 {
		return nil
	}
	var now int64
	if kvs := rs[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		now = kvs[0].ModRevision
	}
	if now != f.Identity {
		return fmt.Errorf("%w: the cluster identity changed since this process judged the datastore trusted (at revision %d, now %d): marked not ready, restored or reinitialised", ErrFenced, f.Identity, now)
	}
	return nil
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
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, fence.Cmps()...)
	cmps = append(cmps, also...)
	resp, err := c.etcd.Txn(ctx).
		If(cmps...).
		Then(op).
		Else(append([]clientv3.Op{clientv3.OpGet(key, clientv3.WithCountOnly())}, fence.Gets()...)...).Commit()
	if err != nil {
		return c.wrap(err)
	}
	switch {
	case resp.Succeeded:
		return nil
	}
	if err := fence.Check(resp.Responses[1:]); err != nil {
		return err
	}
	switch {
	case notFound != nil && resp.Responses[0].GetResponseRange().Count == 0:
		return notFound
	}
	return conflict
}
