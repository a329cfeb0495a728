package lab

import (
	"context"
	"fmt"

	"github.com/vishvananda/netns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// PutRaw writes value under key in the lab's etcd as it is, past
// routed's validation (a corrupt record, or one another writer made).
func (l *Lab) PutRaw(ctx context.Context, key, value string) error {
	return l.withDatastore(func(ds *datastore.Client) error {
		if _, err := ds.Etcd().Put(ctx, key, value); err != nil {
			return fmt.Errorf("lab: put %s: %w", key, err)
		}
		return nil
	})
}

// GetRawPrefix returns every key under prefix in the lab's etcd with its
// value, as stored.
func (l *Lab) GetRawPrefix(ctx context.Context, prefix string) (map[string]string, error) {
	out := map[string]string{}
	err := l.withDatastore(func(ds *datastore.Client) error {
		resp, err := ds.Etcd().Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("lab: get %s: %w", prefix, err)
		}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = string(kv.Value)
		}
		return nil
	})
	return out, err
}

// DeleteRaw deletes key from the lab's etcd.
func (l *Lab) DeleteRaw(ctx context.Context, key string) error {
	return l.withDatastore(func(ds *datastore.Client) error {
		if _, err := ds.Etcd().Delete(ctx, key); err != nil {
			return fmt.Errorf("lab: delete %s: %w", key, err)
		}
		return nil
	})
}

// withDatastore runs f with a datastore client dialling from the router
// namespace, where the lab's etcd listens.
func (l *Lab) withDatastore(f func(*datastore.Client) error) error {
	h, err := netns.GetFromName(l.Topo.RouterNS())
	if err != nil {
		return err
	}
	defer h.Close()
	ds, err := datastore.New(datastore.Config{Endpoints: []string{l.Topo.EtcdEndpoint()}, Dialer: DialIn(h)})
	if err != nil {
		return err
	}
	defer ds.Close()
	return f(ds)
}
