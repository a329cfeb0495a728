package feed_test

import (
	"context"
	"maps"
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

// unreadableHandler records what a Dispatch hands it, in order, as
// "replace:<names>", "unreadable:<names>", "set:<name>", "bad:<name>",
// "delete:<name>".
type unreadableHandler struct {
	mu     sync.Mutex
	events []string
	errs   []error // the Unreadable of each unreadable record handed over
	// vals is the stored value handed over with each, by name.
	vals map[string]string
}

func (h *unreadableHandler) keep(u feed.Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, u.Unreadable)
	if h.vals == nil {
		h.vals = map[string]string{}
	}
	h.vals[u.Name] = string(u.Value)
}

func (h *unreadableHandler) add(e string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *unreadableHandler) ReplaceResources(rs map[api.Kind][]api.Resource) {
	var names []string
	for _, r := range rs[api.KindNetworkPolicy] {
		names = append(names, api.StoreName(r))
	}
	slices.Sort(names)
	h.add("replace:" + join(names))
}

func (h *unreadableHandler) SetResource(r api.Resource)             { h.add("set:" + api.StoreName(r)) }
func (h *unreadableHandler) DeleteResource(_ api.Kind, name string) { h.add("delete:" + name) }
func (h *unreadableHandler) SetUnreadable(u feed.Update)            { h.bad("bad:"+u.Name, u) }
func (h *unreadableHandler) ReplaceUnreadable(us []feed.Update) {
	var names []string
	for _, u := range us {
		names = append(names, u.Name)
		h.keep(u)
	}
	h.add("unreadable:" + join(names))
}

// wait waits until h's events are want.
func (h *unreadableHandler) wait(t *testing.T, what string, want ...string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		if slices.Equal(h.events, want) {
			return ""
		}
		return what + ": have " + join(h.events) + "; want " + join(want)
	})
}

func (h *unreadableHandler) bad(e string, u feed.Update) {
	h.keep(u)
	h.add(e)
}

// plainHandler is a ResourceHandler that is no UnreadableHandler.
type plainHandler struct{ h *unreadableHandler }

func (p plainHandler) ReplaceResources(rs map[api.Kind][]api.Resource) { p.h.ReplaceResources(rs) }
func (p plainHandler) SetResource(r api.Resource)                      { p.h.SetResource(r) }
func (p plainHandler) DeleteResource(k api.Kind, name string)          { p.h.DeleteResource(k, name) }

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// npJSON is a NetworkPolicy as stored (written straight to etcd: the
// test is about what the feed makes of what is there).
func npJSON(ns, name string) string {
	return `{"kind":"NetworkPolicy","metadata":{"name":"` + name + `","namespace":"` + ns + `"},"spec":{"selector":"all()"}}`
}

// TestReportUnreadable: a subscription that asked (ReportUnreadable) is
// told of a policy record that does not decode, in its snapshot (after
// the readable ones) and when a readable one stops decoding; it is set
// again when it decodes again. A subscription that did not ask never
// hears of it (skipped, as before), and a handler that cannot take it
// is not handed a nil resource.
func TestReportUnreadable(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	put := func(name, v string) {
		t.Helper()
		if _, err := ds.Etcd().Put(context.Background(), datastore.Key(api.KindNetworkPolicy, name), v); err != nil {
			t.Fatal(err)
		}
	}
	put("ns1.good", npJSON("ns1", "good"))
	put("ns1.bad", "{not json")
	kinds := []api.Kind{api.KindNetworkPolicy}
	reporting, plain, fallback := &unreadableHandler{}, &unreadableHandler{}, &unreadableHandler{}
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("reporting", kinds, feed.Dispatch{Kinds: kinds, Resources: reporting}, feed.ReportUnreadable(api.KindNetworkPolicy))
		fd.Subscribe("plain", kinds, feed.Dispatch{Kinds: kinds, Resources: plainHandler{plain}})
		// Asked, but its handler takes no unreadable records.
		fd.Subscribe("fallback", kinds, feed.Dispatch{Kinds: kinds, Resources: plainHandler{fallback}}, feed.ReportUnreadable(api.KindNetworkPolicy))
	})
	wait := func(h *unreadableHandler, what string, want ...string) { t.Helper(); h.wait(t, what, want...) }
	wait(reporting, "reporting snapshot", "replace:ns1.good", "unreadable:ns1.bad")
	wait(plain, "plain snapshot", "replace:ns1.good")
	wait(fallback, "fallback snapshot", "replace:ns1.good")

	// A readable policy stops decoding (a number where a string goes).
	const badGood = `{"kind":"NetworkPolicy","metadata":{"name":"good","namespace":"ns1"},"spec":{"selector":7}}`
	put("ns1.good", badGood)
	// Then the bad one is fixed, and the other deleted.
	put("ns1.late", npJSON("ns1", "late"))
	wait(reporting, "reporting after the edit", "replace:ns1.good", "unreadable:ns1.bad", "bad:ns1.good", "set:ns1.late")
	wait(plain, "plain after the edit", "replace:ns1.good", "set:ns1.late")
	wait(fallback, "fallback after the edit", "replace:ns1.good", "set:ns1.late")
	put("ns1.bad", npJSON("ns1", "bad"))
	if _, err := ds.Etcd().Delete(context.Background(), datastore.Key(api.KindNetworkPolicy, "ns1.good")); err != nil {
		t.Fatal(err)
	}
	wait(reporting, "reporting after the fix", "replace:ns1.good", "unreadable:ns1.bad", "bad:ns1.good", "set:ns1.late", "set:ns1.bad", "delete:ns1.good")
	wait(plain, "plain after the fix", "replace:ns1.good", "set:ns1.late", "set:ns1.bad", "delete:ns1.good")
	reporting.mu.Lock()
	defer reporting.mu.Unlock()
	if len(reporting.errs) != 2 || reporting.errs[0] == nil || reporting.errs[1] == nil {
		t.Fatalf("unreadable records' errors: %v; want two, each saying why", reporting.errs)
	}
	// Each comes with its stored bytes (felix salvages a HostEndpoint's
	// node and interface from them).
	if want := map[string]string{"ns1.bad": "{not json", "ns1.good": badGood}; !maps.Equal(reporting.vals, want) {
		t.Fatalf("unreadable records' values: %q; want %q", reporting.vals, want)
	}
}

// TestReportUnreadableMisnamed: for a reported kind, a record that
// decodes but names another object than its key, or none ("null",
// "{}"), is unreadable too: taken as the object it names, the policy
// at that key would be absent.
func TestReportUnreadableMisnamed(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	for name, v := range map[string]string{"ns1.good": npJSON("ns1", "good"), "ns1.null": "null", "ns1.empty": "{}", "ns1.other": npJSON("ns2", "other")} {
		if _, err := ds.Etcd().Put(context.Background(), datastore.Key(api.KindNetworkPolicy, name), v); err != nil {
			t.Fatal(err)
		}
	}
	kinds := []api.Kind{api.KindNetworkPolicy}
	h := &unreadableHandler{}
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("reporting", kinds, feed.Dispatch{Kinds: kinds, Resources: h}, feed.ReportUnreadable(api.KindNetworkPolicy))
	})
	want := []string{"replace:ns1.good", "unreadable:ns1.empty,ns1.null,ns1.other"}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		if slices.Equal(h.events, want) {
			return ""
		}
		return "have " + join(h.events) + "; want " + join(want)
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := map[string]string{"ns1.null": "null", "ns1.empty": "{}", "ns1.other": npJSON("ns2", "other")}; !maps.Equal(h.vals, want) {
		t.Fatalf("misnamed records' values: %q; want %q", h.vals, want)
	}
}

// TestReportUnreadableUndecoded: a kind both taken undecoded and
// reported has its snapshot's unreadable records (not decoding, or
// naming another object) reported all the same, in key order, by
// Dispatch when its handler does not take the snapshot undecoded, and
// live ones as SetUnreadable. Undecoded alone, they are skipped and a
// misnamed one is taken as written, as before.
func TestReportUnreadableUndecoded(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	put := func(name, v string) {
		t.Helper()
		if _, err := ds.Etcd().Put(context.Background(), datastore.Key(api.KindNetworkPolicy, name), v); err != nil {
			t.Fatal(err)
		}
	}
	put("ns1.good", npJSON("ns1", "good"))
	put("ns1.bad", "{not json")
	put("ns1.other", npJSON("ns2", "other"))
	kinds := []api.Kind{api.KindNetworkPolicy}
	reporting, plain := &unreadableHandler{}, &unreadableHandler{}
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("reporting", kinds, feed.Dispatch{Kinds: kinds, Resources: reporting}, feed.Undecoded(api.KindNetworkPolicy), feed.ReportUnreadable(api.KindNetworkPolicy))
		fd.Subscribe("plain", kinds, feed.Dispatch{Kinds: kinds, Resources: plain}, feed.Undecoded(api.KindNetworkPolicy))
	})
	wait := func(h *unreadableHandler, what string, want ...string) { t.Helper(); h.wait(t, what, want...) }
	wait(reporting, "reporting snapshot", "replace:ns1.good", "unreadable:ns1.bad,ns1.other")
	wait(plain, "plain snapshot", "replace:ns1.good,ns2.other", "unreadable:")
	put("ns1.good", "{}")
	wait(reporting, "reporting after the edit", "replace:ns1.good", "unreadable:ns1.bad,ns1.other", "bad:ns1.good")
	reporting.mu.Lock()
	defer reporting.mu.Unlock()
	if want := map[string]string{"ns1.bad": "{not json", "ns1.other": npJSON("ns2", "other"), "ns1.good": "{}"}; !maps.Equal(reporting.vals, want) {
		t.Fatalf("unreadable records' values: %q; want %q", reporting.vals, want)
	}
}
