package lab

import (
	"context"
	"net/http"
	"testing"

	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadEtcdCounters reads a real etcd's /metrics: one Put shows up as one
// unary Put request, and a watch as a watcher.
func TestReadEtcdCounters(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	url := srv.Endpoints[0] + "/metrics"
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	before, err := ReadEtcdCounters(ctx, http.DefaultClient, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/metrics-test", "x"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, "/metrics-test", clientv3.WithCreatedNotify())
	<-wch // the watch exists on the server once created is notified
	after, err := ReadEtcdCounters(ctx, http.DefaultClient, url)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.ByMethod["Put"] - before.ByMethod["Put"]; d != 1 {
		t.Errorf("Put requests grew by %v, want 1 (before %v, after %v)", d, before.ByMethod, after.ByMethod)
	}
	if after.Unary < before.Unary+1 {
		t.Errorf("unary requests %v -> %v, want at least one more", before.Unary, after.Unary)
	}
	if after.Watchers < before.Watchers+1 {
		t.Errorf("watchers %v -> %v, want at least one more", before.Watchers, after.Watchers)
	}
}
