//go:build !cnithin

package plugin

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// timeRequests makes every etcd request of ds (the typed calls and
// pkg/ipam's) record its duration in t. It must run before ds is used.
func timeRequests(ds *datastore.Client, t *timings) {
	ec := ds.Etcd()
	ec.KV = timedKV{KV: ec.KV, t: t}
}

// timedKV is a clientv3.KV that times each request.
type timedKV struct {
	clientv3.KV
	t *timings
}

func (k timedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	start := time.Now()
	defer func() { k.t.request("get", time.Since(start)) }()
	return k.KV.Get(ctx, key, opts...)
}

func (k timedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	start := time.Now()
	defer func() { k.t.request("put", time.Since(start)) }()
	return k.KV.Put(ctx, key, val, opts...)
}

func (k timedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	start := time.Now()
	defer func() { k.t.request("delete", time.Since(start)) }()
	return k.KV.Delete(ctx, key, opts...)
}

func (k timedKV) Txn(ctx context.Context) clientv3.Txn { return &timedTxn{Txn: k.KV.Txn(ctx), t: k.t} }

// timedTxn times a transaction's Commit, naming it "txn" when it
// writes and "read" when it only reads (several reads at one revision).
type timedTxn struct {
	clientv3.Txn
	t      *timings
	writes bool
}

func (x *timedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	x.Txn = x.Txn.If(cs...)
	return x
}

func (x *timedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	x.writes = x.writes || anyWrite(ops)
	x.Txn = x.Txn.Then(ops...)
	return x
}

func (x *timedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	x.writes = x.writes || anyWrite(ops)
	x.Txn = x.Txn.Else(ops...)
	return x
}

func (x *timedTxn) Commit() (*clientv3.TxnResponse, error) {
	kind := "read"
	if x.writes {
		kind = "txn"
	}
	start := time.Now()
	defer func() { x.t.request(kind, time.Since(start)) }()
	return x.Txn.Commit()
}

func anyWrite(ops []clientv3.Op) bool {
	for _, op := range ops {
		if !op.IsGet() {
			return true
		}
	}
	return false
}

// timeStore times store's etcd requests when it is etcd (not a fake),
// and ends the "dial" step.
func (c *call) timeStore(store Store) {
	if ds, ok := store.(*datastore.Client); ok {
		timeRequests(ds, &c.tm)
	}
	c.tm.mark("dial")
}

// request records one etcd request that took d.
func (t *timings) request(kind string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.add("etcd."+kind, d)
}
