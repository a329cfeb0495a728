package datastore

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// cutProxy forwards TCP connections to one etcd until it is cut: then it
// closes every connection it forwards and every new one at once, until
// it is healed (a node cut off from etcd while other clients keep it).
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func newCutProxy(t *testing.T, endpoint string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(endpoint, "http://"), conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		ln.Close()
		p.cutOff()
	})
	go p.serve()
	return p
}

func (p *cutProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

func (p *cutProxy) forward(in net.Conn) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		in.Close()
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.conns[in], p.conns[out] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	in.Close()
	out.Close()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// cutOff closes every forwarded connection and refuses new ones; when it
// returns nothing more reaches the clients behind it.
func (p *cutProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *cutProxy) heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// TestStreamCutOffWhileEtcdCompacts is the e2e test's node cut off from
// every etcd member while the rest of the cluster writes and compacts at
// its current revision. etcd keeps the compaction's own revision: a
// watch from it is served (mvcc reports a compaction only for a watcher
// whose next revision is below it). So a stream that missed exactly one
// write, compacted at that write, resumes and receives it; one that
// missed more lists again (reason compacted). Either way the consumer
// ends with etcd's state: nothing is skipped.
func TestStreamCutOffWhileEtcdCompacts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		writes   int
		wantList bool
	}{
		{"compacted at the one revision missed: resumes", 1, false},
		{"compacted past the revision held: lists", 2, true},
		{"compacted far past the revision held: lists", 5, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			writer, srv := newTestClient(t)
			p := newCutProxy(t, srv.Endpoints[0])
			c := connect(t, Config{Endpoints: []string{p.endpoint()}, RequestTimeout: time.Second})
			put(t, writer, "/cut/probe", "id")
			r := newStreamRecorder()
			startStream(t, c, "/cut/", r, "/cut/probe")
			r.waitFor(t, "the list", func() bool { return len(r.reasons) == 1 })
			held := put(t, writer, "/cut/a", "1")
			r.waitFor(t, "a", func() bool { return r.rev >= held })

			p.cutOff()
			var last int64
			for i := range tt.writes {
				last = put(t, writer, fmt.Sprintf("/cut/w%d", i), "x")
			}
			if _, err := writer.Etcd().Compact(context.Background(), last, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			p.heal()

			want := []string{"/cut/a", "/cut/probe"}
			for i := range tt.writes {
				want = append(want, fmt.Sprintf("/cut/w%d", i))
			}
			slices.Sort(want)
			r.waitFor(t, "every write made while cut off", func() bool { return r.rev >= last && r.keys() == strings.Join(want, ",") })
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Logf("held %d, compacted at %d: lists %v, resumes %d", held, last, r.reasons, r.resumes)
			listed := slices.Contains(r.reasons, ListCompacted)
			if listed != tt.wantList {
				t.Fatalf("held revision %d, etcd compacted at %d: lists %v, resumes %d; want a list (compacted) %v", held, last, r.reasons, r.resumes, tt.wantList)
			}
			if !tt.wantList && (len(r.reasons) != 1 || r.resumes < 1) {
				t.Fatalf("lists %v, resumes %d; want only the first list and a resume", r.reasons, r.resumes)
			}
		})
	}
}
