package feed_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

// wepName is endpoint i's name, on node n<i mod 200>.
func wepName(i int) string { return fmt.Sprintf("n%d-k8s-default-w%04d-eth0", i%200, i) }

func wep(i int) string {
	return fmt.Sprintf("apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: %s}\n"+
		"spec: {node: n%d, containerID: c%d, interfaceName: cali%d, ipNetworks: [10.1.%d.%d/32]}\n", wepName(i), i%200, i, i, i/250, i%250+1)
}

// encodedHandler is a resource handler that takes snapshots' undecoded
// objects as they are, and records what it was given.
type encodedHandler struct {
	mu       sync.Mutex
	replaced [][]string // per snapshot: "Kind/name" decoded, then "enc:Kind/name"
	decoded  [][]string // per snapshot: what DecodeEach made of the undecoded, in order
	set      []string
}

func (h *encodedHandler) ReplaceResources(rs map[api.Kind][]api.Resource) { h.ReplaceEncoded(rs, nil) }

func (h *encodedHandler) ReplaceEncoded(rs map[api.Kind][]api.Resource, enc []feed.Encoded) {
	var got, dec []string
	for _, k := range slices.Sorted(func(yield func(api.Kind) bool) {
		for k := range rs {
			if !yield(k) {
				return
			}
		}
	}) {
		if len(rs[k]) == 0 {
			got = append(got, "none:"+string(k))
		}
		for _, r := range rs[k] {
			got = append(got, string(k)+"/"+api.StoreName(r))
		}
	}
	for _, e := range enc {
		got = append(got, "enc:"+string(e.Kind())+"/"+e.Name())
	}
	feed.DecodeEach(enc, func(r api.Resource) {
		dec = append(dec, string(r.GetKind())+"/"+api.StoreName(r)+"@"+r.Meta().ResourceVersion)
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.replaced = append(h.replaced, got)
	h.decoded = append(h.decoded, dec)
}

func (h *encodedHandler) SetResource(r api.Resource) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set = append(h.set, string(r.GetKind())+"/"+api.StoreName(r))
}

func (h *encodedHandler) DeleteResource(k api.Kind, name string) {}

// TestUndecodedSnapshot: a subscription that takes endpoints undecoded
// gets a snapshot's endpoints as stored, in key order, and the other
// kinds decoded; decoding them a chunk at a time gives every readable
// one with its revision, in order, and skips an unreadable one; a
// change after the snapshot comes decoded. A handler that cannot take
// them undecoded gets them decoded all the same.
func TestUndecodedSnapshot(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	dstest.Apply(t, ds, node("n0"))
	var want []string
	bad := wepName(7)
	for i := range 2500 { // more than one chunk
		want = append(want, "WorkloadEndpoint/"+wepName(i))
		if i != 7 {
			dstest.Apply(t, ds, wep(i))
		}
	}
	slices.Sort(want)
	if _, err := ds.Etcd().Put(context.Background(), datastore.Key(api.KindWorkloadEndpoint, bad), "{not json"); err != nil {
		t.Fatal(err)
	}
	kinds := []api.Kind{api.KindNode, api.KindWorkloadEndpoint}
	undecoded, decoded := &encodedHandler{}, &encodedHandler{}
	plain := newRecorder()
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("undecoded", kinds, feed.Dispatch{Kinds: kinds, Resources: undecoded}, feed.Undecoded(api.KindWorkloadEndpoint))
		fd.Subscribe("fallback", kinds, feed.Dispatch{Kinds: kinds, Resources: fallback{decoded}}, feed.Undecoded(api.KindWorkloadEndpoint))
		fd.Subscribe("plain", kinds, plain)
	})
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		undecoded.mu.Lock()
		defer undecoded.mu.Unlock()
		decoded.mu.Lock()
		defer decoded.mu.Unlock()
		if len(undecoded.replaced) == 1 && len(decoded.replaced) == 1 {
			return ""
		}
		return "waiting for both snapshots"
	})
	got := undecoded.replaced[0]
	if len(got) != 2502 || got[0] != "Node/n0" || got[1] != "none:WorkloadEndpoint" {
		t.Fatalf("snapshot: %d objects, first %q; want Node/n0 decoded, an empty list of endpoints and 2,500 endpoints undecoded", len(got), got[:2])
	}
	for i, w := range want {
		if got[i+2] != "enc:"+w {
			t.Fatalf("undecoded %d is %q, want %q (every endpoint, unreadable too, in key order)", i, got[i+2], "enc:"+w)
		}
	}
	dec := undecoded.decoded[0]
	if len(dec) != 2499 {
		t.Fatalf("decoded %d endpoints, want 2,499 (the unreadable one skipped)", len(dec))
	}
	readable := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return w == "WorkloadEndpoint/"+bad })
	for i, w := range readable {
		if name, _, _ := cutAt(dec[i]); name != w {
			t.Fatalf("decoded %d is %q, want %q", i, dec[i], w)
		}
	}
	// The same objects, with the same revisions, as a subscriber that
	// takes them decoded.
	plain.wait(t, "the plain snapshot", func() bool { return plain.snapshots == 1 })
	plain.mu.Lock()
	for _, d := range dec {
		name, rev, _ := cutAt(d)
		r := plain.state[name]
		if r == nil || r.Meta().ResourceVersion != rev {
			t.Errorf("%s: decoded at revision %s; the decoded subscriber has %v", name, rev, r)
		}
	}
	plain.mu.Unlock()
	fb := decoded.replaced[0]
	if len(fb) != 2500 || fb[0] != "Node/n0" || !slices.Equal(fb[1:], readable) {
		t.Fatalf("a handler without ReplaceEncoded got %d objects, want Node/n0 and the 2,499 readable endpoints decoded, in key order: %v", len(fb), fb[:min(5, len(fb))])
	}
	dstest.Apply(t, ds, wep(9999))
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		undecoded.mu.Lock()
		defer undecoded.mu.Unlock()
		if slices.Equal(undecoded.set, []string{"WorkloadEndpoint/" + wepName(9999)}) && len(undecoded.replaced) == 1 {
			return ""
		}
		return fmt.Sprintf("waiting for the change decoded: set %v", undecoded.set)
	})
}

// fallback hides an encodedHandler's ReplaceEncoded.
type fallback struct{ h *encodedHandler }

func (f fallback) ReplaceResources(rs map[api.Kind][]api.Resource) { f.h.ReplaceEncoded(rs, nil) }
func (f fallback) SetResource(r api.Resource)                      { f.h.SetResource(r) }
func (f fallback) DeleteResource(k api.Kind, name string)          {}

func cutAt(s string) (name, rev string, ok bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
