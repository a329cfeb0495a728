package ipam

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/datastore"
)

// TestFailsFastWhenEtcdIsDown: a dead etcd costs one request timeout, not
// one per step or retry, so a CNI ADD fails fast with a clear error.
func TestFailsFastWhenEtcdIsDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + l.Addr().String()
	l.Close()
	ds, err := datastore.New(datastore.Config{Endpoints: []string{ep}, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	c := New(ds)
	start := time.Now()
	_, err = c.AutoAssign(context.Background(), AssignArgs{Node: "n1", HandleID: "net.c1", Num: 1})
	took := time.Since(start)
	if !errors.Is(err, datastore.ErrUnavailable) {
		t.Fatalf("AutoAssign with etcd down: %v, want ErrUnavailable", err)
	}
	if took > 2500*time.Millisecond {
		t.Errorf("AutoAssign took %s with a 1s request timeout: it must give up after the first unreachable call", took)
	}
	start = time.Now()
	_, err = c.ReleaseByHandle(context.Background(), "net.c1")
	if took := time.Since(start); !errors.Is(err, datastore.ErrUnavailable) || took > 2500*time.Millisecond {
		t.Errorf("ReleaseByHandle with etcd down: %v after %s", err, took)
	}
}
