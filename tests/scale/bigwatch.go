package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
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
	// kinds is what the first watch received, by key kind ("ipam/blocks",
	// "workloadendpoints", ...): that one watch decodes its responses.
	kindsMu sync.Mutex
	kinds   map[string]kindBytes
}

// kindBytes counts the events of one key kind and their keys' and
// values' bytes.
type kindBytes struct{ events, bytes int64 }

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
		// A response without events is small; decoding only those
		// finds the one that ends the watch (etcd cancels a watcher
		// that fell behind a compaction) at no cost for the others.
		if len(data) < 256 {
			var r pb.WatchResponse
			if r.Unmarshal(data) == nil && ended(&r) {
				f.n = -1
			}
		}
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
		go w.read(wctx, st, created, i == 0)
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
func (w *watchLoad) read(ctx context.Context, st pb.Watch_WatchClient, created chan<- error, decode bool) {
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
		if decode {
			f.n = w.recvDecoded(st)
		} else if err := st.RecvMsg(&f); err != nil {
			f.n = -1
		}
		if f.n < 0 {
			if ctx.Err() == nil {
				w.broken.Add(1)
			}
			return
		}
		w.msgs.Add(1)
		w.bytes.Add(int64(f.n))
	}
}

// recvDecoded receives one response whole and counts its events by key
// kind; it returns the response's size, -1 when the stream ended.
func (w *watchLoad) recvDecoded(st pb.Watch_WatchClient) int {
	r := new(pb.WatchResponse)
	if err := st.RecvMsg(r); err != nil || ended(r) {
		return -1
	}
	w.kindsMu.Lock()
	defer w.kindsMu.Unlock()
	if w.kinds == nil {
		w.kinds = map[string]kindBytes{}
	}
	for _, ev := range r.Events {
		k := keyKind(string(ev.Kv.Key))
		c := w.kinds[k]
		c.events++
		c.bytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
		w.kinds[k] = c
	}
	return r.Size()
}

// keyKind is the kind of a key under routed's prefix: its first path
// segment, with the second under ipam/.
func keyKind(key string) string {
	rest := strings.TrimPrefix(key, datastore.KeyPrefix)
	kind, rest, _ := strings.Cut(rest, "/")
	if kind == "ipam" {
		sub, _, _ := strings.Cut(rest, "/")
		kind += "/" + sub
	}
	return kind
}

// kindCounts is a copy of what the decoding watch has counted so far.
func (w *watchLoad) kindCounts() map[string]kindBytes {
	w.kindsMu.Lock()
	defer w.kindsMu.Unlock()
	return maps.Clone(w.kinds)
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

// kindsSince is what was counted in now and not yet in then.
func kindsSince(now, then map[string]kindBytes) map[string]kindBytes {
	out := map[string]kindBytes{}
	for k, c := range now {
		p := then[k]
		if d := (kindBytes{c.events - p.events, c.bytes - p.bytes}); d.events > 0 {
			out[k] = d
		}
	}
	return out
}

// kindsLine lists kinds by bytes, largest first, with each one's share
// of the bytes and its mean event size.
func kindsLine(kinds map[string]kindBytes) string {
	var total int64
	for _, c := range kinds {
		total += c.bytes
	}
	if total == 0 {
		return ""
	}
	names := slices.SortedFunc(maps.Keys(kinds), func(a, b string) int { return cmp.Compare(kinds[b].bytes, kinds[a].bytes) })
	parts := make([]string, 0, len(names))
	for _, k := range names {
		c := kinds[k]
		parts = append(parts, fmt.Sprintf("%s %.1f %% (%d events, %d B each)", k, 100*float64(c.bytes)/float64(total), c.events, c.bytes/c.events))
	}
	return strings.Join(parts, ", ")
}

// ended reports whether etcd ended the watch with this response: a
// watcher behind a compaction is canceled with the compaction's
// revision, and sends nothing more.
func ended(r *pb.WatchResponse) bool { return r.Canceled || r.CompactRevision != 0 }
