package ipam

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestCheckInPagesFindsWhatOneReadFinds: Check and GC read handle records
// and endpoints page by page and keep only marks and findings; read one
// key a page, across every page boundary, they report exactly what they
// report when each range fits in one page, on a datastore with every
// kind of problem: leaks, an address only an endpoint's address names,
// an address two endpoints name, a handle with no address, a handle
// record that disagrees with its block, unreadable records.
func TestCheckInPagesFindsWhatOneReadFinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.20.0.0/24", 29)
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		e.node(n, nil)
	}
	clk := newClock()
	c := New(e.ds)
	c.now = clk.now
	ctx := ctxT(t)
	var leaked []string
	ips := map[int]string{}
	for i := range 12 {
		node, h := nodes[i%3], fmt.Sprintf("net.p%02d", i)
		ip := assign(t, c, node, h)
		ips[i] = ip.String()
		if i%4 == 0 && i > 0 {
			leaked = append(leaked, ip.String()) // no endpoint names it
			continue
		}
		if i > 0 {
			e.wep(node, fmt.Sprintf("pod-%02d", i), h, ip)
		}
	}
	// p00's address is named by an endpoint with another handle: in use
	// (not a leak) but a mismatch; p01's by two endpoints.
	e.wep("n1", "stray", "net.other", mustParse(ips[0]))
	e.wep("n2", "dup", "net.p01", mustParse(ips[1]))
	mustPut(t, e, handleKey("ghost"), `{"id":"ghost","blocks":{}}`)
	mustPut(t, e, handleKey("net.p02"), `{"id":"net.p02","blocks":{"10.20.0.0/29":[7]}}`)
	mustPut(t, e, handleKey("net.bad"), `{not json`)
	mustPut(t, e, datastore.Key(api.KindWorkloadEndpoint, "zz-broken"), `{oops`)
	clk.advance(11 * time.Minute)

	whole, err := c.Check(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	paged := New(e.ds)
	paged.now, paged.pageLimit = clk.now, 1
	r, err := paged.Check(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, whole) {
		t.Fatalf("in pages of one key:\n%+v\nin one page:\n%+v", r, whole)
	}
	var leaks []string
	for _, l := range r.Leaks {
		leaks = append(leaks, l.IP.String())
	}
	slices.Sort(leaks)
	slices.Sort(leaked)
	incons := strings.Join(r.Inconsistencies, "\n")
	switch {
	case !slices.Equal(leaks, leaked):
		t.Errorf("leaks %v, want %v", leaks, leaked)
	case len(r.SharedAddresses) != 1 || r.SharedAddresses[0].IP.String() != ips[1] || len(r.SharedAddresses[0].Endpoints) != 2:
		t.Errorf("shared %+v, want %s named twice", r.SharedAddresses, ips[1])
	case len(r.EndpointMismatches) != 1 || r.EndpointMismatches[0].IP.String() != ips[0]:
		t.Errorf("mismatches %+v, want %s's", r.EndpointMismatches, ips[0])
	case !slices.Equal(r.EmptyHandles, []string{"ghost"}):
		t.Errorf("empty handles %v, want ghost", r.EmptyHandles)
	case !strings.Contains(incons, "net.bad") || !strings.Contains(incons, "zz-broken") || !strings.Contains(incons, `"net.p02" record says`):
		t.Errorf("inconsistencies %q: want the unreadable handle and endpoint and p02's record", r.Inconsistencies)
	}

	// The endpoint record nothing can be read from holds every pod
	// address back (TestGCKeepsWhatUnreadableEndpointsHold); deleted,
	// GC in pages frees the leaks and repairs the handles.
	if r.Held == "" {
		t.Error("Check says nothing of the endpoint record nothing can be read from")
	}
	if _, err := e.ds.Etcd().Delete(ctx, datastore.Key(api.KindWorkloadEndpoint, "zz-broken")); err != nil {
		t.Fatal(err)
	}
	g, err := paged.GC(ctx, 10*time.Minute)
	if err != nil || len(g.Errors) > 0 {
		t.Fatalf("GC: %v %v", err, g.Errors)
	}
	if len(g.Released) != len(leaked) || !slices.Equal(g.RemovedHandles, []string{"ghost"}) || len(g.Repaired) != 1 {
		t.Fatalf("GC in pages did %+v", g)
	}
	after, err := paged.Check(ctx, 10*time.Minute)
	if err != nil || len(after.Leaks) != 0 || len(after.EmptyHandles) != 0 {
		t.Fatalf("after GC: %+v, %v", after, err)
	}
}

// TestCheckPagesAreOneSnapshot: every page is read at the revision of
// the first read, so an endpoint deleted while the pages are read still
// counts (as it did when everything was one read), and its address is
// not a leak of this pass; the next pass sees it gone.
func TestCheckPagesAreOneSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.21.0.0/24", 26)
	e.node("n1", nil)
	clk := newClock()
	c := New(e.ds)
	c.now = clk.now
	ctx := ctxT(t)
	e.wep("n1", "a-first", "net.a", assign(t, c, "n1", "net.a"))
	late := assign(t, c, "n1", "net.z")
	lateWep := e.wep("n1", "z-last", "net.z", late)
	clk.advance(11 * time.Minute)

	c.pageLimit = 1
	deleted := false
	c.afterPage = func(prefix string) {
		if prefix == datastore.KindPrefix(api.KindWorkloadEndpoint) && !deleted {
			deleted = true // after the first endpoint, before the last
			if err := e.ds.Delete(ctx, api.KindWorkloadEndpoint, lateWep, ""); err != nil {
				t.Error(err)
			}
		}
	}
	r, err := c.Check(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !deleted || len(r.Leaks) != 0 {
		t.Fatalf("endpoint deleted between pages (%v): leaks %+v, want none at the pass's revision", deleted, r.Leaks)
	}
	r, err = c.Check(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leaks) != 1 || r.Leaks[0].IP != late {
		t.Fatalf("next pass: leaks %+v, want %s", r.Leaks, late)
	}
}
