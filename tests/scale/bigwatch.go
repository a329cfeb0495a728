package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/routed-net/routed/pkg/datastore"
)

// watchLoad is the etcd side of the simulated nodes: one watch per node
// on the whole of routed's prefix, from the current revision, with
// progress notifications, as a node's feed holds (pkg/datastore
// Stream), each on its own gRPC stream, spread over a few connections.
// What etcd sends is read and counted but not decoded: the harness has
// two cores to share with etcd and the real nodes, and the cost that
// matters is etcd's (one copy of every event per watcher).
type watchLoad struct {
	conns   []*grpc.ClientConn
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	msgs    atomic.Int64
	bytes   atomic.Int64
	broken  atomic.Int64
	created int
}

// rawFrame is a response counted, not decoded.
type rawFrame struct{ n int }

// countingCodec marshals requests with their own (gogo) Marshal and, for
// rawFrame targets, only counts the bytes of a response; other targets
// are decoded. Its name is "proto", the content-subtype etcd serves.
type countingCodec struct{}

func (countingCodec) Name() string { return "proto" }

func (countingCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(interface{ Marshal() ([]byte, error) })
	if !ok {
		return nil, fmt.Errorf("scale: cannot marshal %T", v)
	}
	return m.Marshal()
}

func (countingCodec) Unmarshal(data []byte, v any) error {
	if f, ok := v.(*rawFrame); ok {
		f.n = len(data)
		return nil
	}
	m, ok := v.(interface{ Unmarshal([]byte) error })
	if !ok {
		return fmt.Errorf("scale: cannot unmarshal into %T", v)
	}
	return m.Unmarshal(data)
}

// startWatchers opens n watches over conns connections dialled through
// dial, waits until etcd has created each, and keeps reading them until
// stop.
func startWatchers(ctx context.Context, dial dialer, endpoint string, n, conns int) (*watchLoad, error) {
	w := &watchLoad{}
	wctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	addr := strings.TrimPrefix(endpoint, "http://")
	for i := 0; i < max(1, min(conns, n)); i++ {
		c, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return dial(ctx, "tcp", a) }),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			w.stop()
			return nil, err
		}
		w.conns = append(w.conns, c)
	}
	prefix := datastore.KeyPrefix
	req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)), ProgressNotify: true}}}
	created := make(chan error, n)
	for i := 0; i < n; i++ {
		st, err := pb.NewWatchClient(w.conns[i%len(w.conns)]).Watch(wctx, grpc.ForceCodec(countingCodec{}))
		if err != nil {
			w.stop()
			return nil, fmt.Errorf("watch %d: %w", i, err)
		}
		if err := st.Send(req); err != nil {
			w.stop()
			return nil, fmt.Errorf("watch %d: %w", i, err)
		}
		w.wg.Add(1)
		go w.read(wctx, st, created)
	}
	deadline := time.After(2 * time.Minute)
	for i := 0; i < n; i++ {
		select {
		case err := <-created:
			if err != nil {
				w.stop()
				return nil, err
			}
			w.created++
		case <-deadline:
			w.stop()
			return nil, fmt.Errorf("%d of %d watches created after 2 minutes", w.created, n)
		case <-ctx.Done():
			w.stop()
			return nil, ctx.Err()
		}
	}
	return w, nil
}

// read takes the creation answer, then counts every response until the
// stream ends; every 30 s it asks for a progress notification, as a
// node's stream does.
func (w *watchLoad) read(ctx context.Context, st pb.Watch_WatchClient, created chan<- error) {
	defer w.wg.Done()
	first := new(pb.WatchResponse)
	if err := st.RecvMsg(first); err != nil || !first.Created {
		created <- fmt.Errorf("watch not created: %v (canceled: %v %s)", err, first.Canceled, first.CancelReason)
		return
	}
	created <- nil
	var sendMu sync.Mutex
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sendMu.Lock()
				_ = st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
				sendMu.Unlock()
			}
		}
	}()
	for {
		var f rawFrame
		if err := st.RecvMsg(&f); err != nil {
			if ctx.Err() == nil {
				w.broken.Add(1)
			}
			return
		}
		w.msgs.Add(1)
		w.bytes.Add(int64(f.n))
	}
}

// counts returns responses and bytes received so far.
func (w *watchLoad) counts() (msgs, bytes int64) { return w.msgs.Load(), w.bytes.Load() }

func (w *watchLoad) stop() {
	if w == nil {
		return
	}
	w.cancel()
	for _, c := range w.conns {
		_ = c.Close()
	}
	w.wg.Wait()
}
