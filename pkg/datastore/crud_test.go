package datastore

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func TestCRUD(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	created, err := c.Create(ctx, newPool("pool-b", "10.2.0.0/16"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	rv1 := created.Meta().ResourceVersion
	if n, err := strconv.ParseInt(rv1, 10, 64); err != nil || n <= 0 {
		t.Fatalf("Create must set a positive ResourceVersion, got %q", rv1)
	}
	if created.Meta().CreationTimestamp == "" {
		t.Error("Create must set CreationTimestamp")
	}
	if created.(*api.IPPool).Spec.BlockSize != api.DefaultBlockSize {
		t.Error("Create must apply defaults")
	}
	if _, err := c.Create(ctx, newPool("pool-a", "10.1.0.0/16")); err != nil {
		t.Fatalf("Create second pool: %v", err)
	}

	got, err := c.Get(ctx, api.KindIPPool, "pool-b")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Meta().ResourceVersion != rv1 {
		t.Errorf("Get ResourceVersion = %q, want %q", got.Meta().ResourceVersion, rv1)
	}
	if got.(*api.IPPool).Spec != created.(*api.IPPool).Spec || got.Meta().CreationTimestamp != created.Meta().CreationTimestamp {
		t.Errorf("Get = %+v, want %+v", got, created)
	}

	list, rev, err := c.List(ctx, api.KindIPPool)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 2 || list[0].Meta().Name != "pool-a" || list[1].Meta().Name != "pool-b" {
		t.Fatalf("List must return both pools sorted by name, got %v", list)
	}
	if rv, _ := strconv.ParseInt(list[1].Meta().ResourceVersion, 10, 64); rev < rv {
		t.Errorf("List revision %d older than an item's %d", rev, rv)
	}
	if other, _, err := c.List(ctx, api.KindNode); err != nil || len(other) != 0 {
		t.Errorf("List of another kind: %v, %v", other, err)
	}

	// Update at the current version succeeds and moves the version on.
	p := got.(*api.IPPool)
	p.Spec.NATOutgoing = true
	updated, err := c.Update(ctx, p)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	rv2 := updated.Meta().ResourceVersion
	if rv2 == rv1 {
		t.Fatal("Update must change the ResourceVersion")
	}
	got, err = c.Get(ctx, api.KindIPPool, "pool-b")
	if err != nil || !got.(*api.IPPool).Spec.NATOutgoing || got.Meta().ResourceVersion != rv2 {
		t.Fatalf("Get after Update = %+v, %v", got, err)
	}

	// Delete at the current version removes it.
	if err := c.Delete(ctx, api.KindIPPool, "pool-b", rv2); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = c.Get(ctx, api.KindIPPool, "pool-b")
	wantErr(t, "Get after Delete", err, ErrNotFound)
	if !IsNotFound(err) {
		t.Error("IsNotFound must agree with errors.Is")
	}
	// Delete with no version removes whatever is there.
	if err := c.Delete(ctx, api.KindIPPool, "pool-a", ""); err != nil {
		t.Fatalf("Delete without version: %v", err)
	}
	if list, _, _ := c.List(ctx, api.KindIPPool); len(list) != 0 {
		t.Fatalf("List after deleting all: %v", list)
	}
}

func TestCRUDErrors(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	orig, err := c.Create(ctx, newNode("n1", nil))
	if err != nil {
		t.Fatal(err)
	}
	rv := orig.Meta().ResourceVersion
	stale := *orig.(*api.Node)

	_, err = c.Create(ctx, newNode("n1", map[string]string{"a": "b"}))
	wantErr(t, "Create existing", err, ErrExists)
	if !strings.Contains(err.Error(), `Node "n1"`) {
		t.Errorf("error should name the object: %v", err)
	}

	_, err = c.Get(ctx, api.KindNode, "missing")
	wantErr(t, "Get missing", err, ErrNotFound)
	if !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("error should name the object: %v", err)
	}

	// Move the object on, so rv is stale.
	cur := *orig.(*api.Node)
	cur.Metadata.Labels = map[string]string{"gen": "2"}
	if _, err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"update at stale version", func() error {
			s := stale
			s.Metadata.Labels = map[string]string{"gen": "stale"}
			_, err := c.Update(ctx, &s)
			return err
		}, ErrConflict},
		{"update without version", func() error {
			n := newNode("n1", nil)
			_, err := c.Update(ctx, n)
			return err
		}, ErrConflict},
		{"update with garbage version", func() error {
			n := newNode("n1", nil)
			n.Metadata.ResourceVersion = "abc"
			_, err := c.Update(ctx, n)
			return err
		}, ErrConflict},
		{"update of missing object", func() error {
			n := newNode("ghost", nil)
			n.Metadata.ResourceVersion = rv
			_, err := c.Update(ctx, n)
			return err
		}, ErrNotFound},
		{"update invalid", func() error {
			n := cur
			n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: "10.0.0.5"}
			_, err := c.Update(ctx, &n)
			return err
		}, api.ErrInvalid},
		{"create invalid", func() error {
			_, err := c.Create(ctx, newPool("bad", "fe80::/64")) // link-local
			return err
		}, api.ErrInvalid},
		{"delete at stale version", func() error { return c.Delete(ctx, api.KindNode, "n1", rv) }, ErrConflict},
		{"delete with garbage version", func() error { return c.Delete(ctx, api.KindNode, "n1", "x") }, ErrConflict},
		{"delete missing at a version", func() error { return c.Delete(ctx, api.KindNode, "ghost", rv) }, ErrNotFound},
		{"delete missing without version", func() error { return c.Delete(ctx, api.KindNode, "ghost", "") }, ErrNotFound},
	}
	for _, tt := range tests {
		wantErr(t, tt.name, tt.op(), tt.want)
	}

	// None of the failures changed the stored object.
	got, err := c.Get(ctx, api.KindNode, "n1")
	if err != nil || got.Meta().Labels["gen"] != "2" {
		t.Fatalf("stored node changed by a failed write: %+v, %v", got, err)
	}
	if _, err := c.Get(ctx, api.KindIPPool, "bad"); !IsNotFound(err) {
		t.Fatalf("invalid pool was stored: %v", err)
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	first, err := c.Apply(ctx, newNode("n1", map[string]string{"v": "1"}))
	if err != nil {
		t.Fatalf("Apply (create): %v", err)
	}
	created := first.Meta().CreationTimestamp

	// A fresh object without version replaces the stored one.
	second, err := c.Apply(ctx, newNode("n1", map[string]string{"v": "2"}))
	if err != nil {
		t.Fatalf("Apply (update): %v", err)
	}
	if second.Meta().ResourceVersion == first.Meta().ResourceVersion {
		t.Error("Apply update must move the version")
	}
	got, err := c.Get(ctx, api.KindNode, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta().Labels["v"] != "2" {
		t.Errorf("Apply did not update: %v", got.Meta().Labels)
	}
	if got.Meta().CreationTimestamp != created {
		t.Errorf("Apply must keep CreationTimestamp %q, got %q", created, got.Meta().CreationTimestamp)
	}

	// A stale version in the applied object is ignored: Apply is "make it so".
	stale := newNode("n1", map[string]string{"v": "3"})
	stale.Metadata.ResourceVersion = first.Meta().ResourceVersion
	if _, err := c.Apply(ctx, stale); err != nil {
		t.Fatalf("Apply with stale version: %v", err)
	}

	// After a delete, Apply creates again.
	if err := c.Delete(ctx, api.KindNode, "n1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, stale); err != nil {
		t.Fatalf("Apply after delete: %v", err)
	}

	_, err = c.Apply(ctx, newPool("bad", "10.0.0.0/28"))
	wantErr(t, "Apply invalid", err, api.ErrInvalid)
}

func TestStoredForm(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	n := newNode("n1", nil)
	n.Metadata.ResourceVersion = "12345"
	if _, err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Etcd().Get(ctx, Key(api.KindNode, "n1"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get: %v, %v", resp, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatalf("stored value is not JSON: %v", err)
	}
	if _, has := raw["metadata"].(map[string]any)["resourceVersion"]; has {
		t.Errorf("resourceVersion must not be stored: %s", resp.Kvs[0].Value)
	}
	if raw["kind"] != "Node" || raw["apiVersion"] != api.APIVersion {
		t.Errorf("stored object lacks its type: %s", resp.Kvs[0].Value)
	}
	if got := string(resp.Kvs[0].Key); got != "/routed/v1/nodes/n1" {
		t.Errorf("key = %q", got)
	}
	if got := Key(api.KindBGPConfiguration, "default"); got != "/routed/v1/bgpconfigurations/default" {
		t.Errorf("Key(BGPConfiguration) = %q", got)
	}

	// Same name, different kinds: separate objects.
	if _, err := c.Create(ctx, newPool("n1", "10.0.0.0/16")); err != nil {
		t.Fatalf("pool named like a node: %v", err)
	}

	// A corrupt record is skipped by List and reported by Get, but does
	// not hide the good ones.
	if _, err := c.Etcd().Put(ctx, Key(api.KindNode, "corrupt"), "{not json"); err != nil {
		t.Fatal(err)
	}
	list, _, err := c.List(ctx, api.KindNode)
	if err != nil || len(list) != 1 || list[0].Meta().Name != "n1" {
		t.Fatalf("List with a corrupt record: %v, %v", list, err)
	}
	if _, err := c.Get(ctx, api.KindNode, "corrupt"); err == nil || IsNotFound(err) {
		t.Fatalf("Get of a corrupt record must fail, and not as not-found: %v", err)
	}
}

func TestPoolOverlapRejected(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	if _, err := c.Create(ctx, newPool("a", "10.244.0.0/16")); err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, newPool("b", "10.245.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		op   func() error
	}{
		{"create subset", func() error { _, err := c.Create(ctx, newPool("c", "10.244.3.0/24")); return err }},
		{"create superset", func() error { _, err := c.Create(ctx, newPool("c", "10.0.0.0/8")); return err }},
		{"apply overlapping", func() error { _, err := c.Apply(ctx, newPool("c", "10.244.0.0/16")); return err }},
		{"update into another pool", func() error {
			p := *b.(*api.IPPool)
			p.Spec.CIDR = "10.244.0.0/15"
			_, err := c.Update(ctx, &p)
			return err
		}},
	}
	for _, tt := range tests {
		err := tt.op()
		wantErr(t, tt.name, err, api.ErrInvalid)
		if !strings.Contains(err.Error(), "spec.cidr") || !strings.Contains(err.Error(), `"a"`) {
			t.Errorf("%s: error should name spec.cidr and the existing pool: %v", tt.name, err)
		}
	}

	// A pool never overlaps itself: changing its own settings is fine.
	p := *b.(*api.IPPool)
	p.Spec.NATOutgoing = !p.Spec.NATOutgoing
	upd, err := c.Update(ctx, &p)
	if err != nil {
		t.Fatalf("update own pool: %v", err)
	}
	// Its cidr and blockSize are fixed once it exists, even into free
	// space: its blocks were carved with them.
	for field, change := range map[string]func(*api.IPPool){
		"spec.blockSize": func(p *api.IPPool) { p.Spec.BlockSize = 28 },
		"spec.cidr":      func(p *api.IPPool) { p.Spec.CIDR = "10.246.0.0/15" },
	} {
		p = *upd.(*api.IPPool)
		change(&p)
		_, err := c.Update(ctx, &p)
		wantErr(t, field, err, api.ErrInvalid)
		if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "create a new pool") {
			t.Errorf("changing %s: %v", field, err)
		}
	}
	list, _, _ := c.List(ctx, api.KindIPPool)
	if len(list) != 2 {
		t.Fatalf("want 2 pools, got %v", list)
	}
}
