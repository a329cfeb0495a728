package datastore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// prepare applies defaults, validates, and serialises r for storage.
// Server-side fields (resourceVersion) are not stored.
func prepare(r api.Resource) ([]byte, error) {
	api.SetDefaults(r)
	if err := r.Validate(); err != nil {
		return nil, err
	}
	m := r.Meta()
	rv := m.ResourceVersion
	m.ResourceVersion = ""
	b, err := json.Marshal(r)
	m.ResourceVersion = rv
	return b, err
}

// v1Semantics decodes exactly as encoding/json does (case-insensitive
// names, duplicates and invalid UTF-8 accepted as before), with the
// faster decoder of encoding/json/v2's module: a stored WorkloadEndpoint
// decodes in about half encoding/json's time with a third of its
// allocations (BenchmarkDecodeStored). A node restarted in a cluster of
// 150,000 pods spent 3.0 of its first 7.3 s of CPU decoding its
// snapshot with encoding/json (issue 36).
var v1Semantics = jsonv1.DefaultOptionsV1()

func decode(k api.Kind, kv []byte, rev int64) (api.Resource, error) {
	r, err := api.New(k)
	if err != nil {
		return nil, err
	}
	if err := jsonv2.Unmarshal(kv, r, v1Semantics); err != nil {
		return nil, &CorruptError{Kind: k, Revision: rev, Value: kv, Err: err}
	}
	r.Meta().ResourceVersion = strconv.FormatInt(rev, 10)
	return r, nil
}

func revision(r api.Resource) (int64, error) {
	rv := r.Meta().ResourceVersion
	if rv == "" {
		return 0, fmt.Errorf("%w: %s %q has no resourceVersion; read it first", ErrConflict, r.GetKind(), api.StoreName(r))
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %s %q: bad resourceVersion %q", ErrConflict, r.GetKind(), api.StoreName(r), rv)
	}
	return n, nil
}

// Create stores r only if no resource of its kind and name exists, and
// returns it with its ResourceVersion set.
func (c *Client) Create(ctx context.Context, r api.Resource) (api.Resource, error) {
	if r.Meta().CreationTimestamp == "" {
		r.Meta().CreationTimestamp = time.Now().UTC().Format(time.RFC3339)
	}
	b, err := prepare(r)
	if err != nil {
		return nil, err
	}
	k, name := r.GetKind(), api.StoreName(r)
	key := Key(k, name)
	cmps, err := c.writeGuards(ctx, r, clientv3.Compare(clientv3.Version(key), "=", 0))
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.etcd.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(b))).
		Else(clientv3.OpGet(key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return nil, c.wrap(err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count > 0 {
			return nil, objErr(k, name, ErrExists)
		}
		return nil, objErr(k, name, ErrConflict) // another pool changed meanwhile
	}
	r.Meta().ResourceVersion = strconv.FormatInt(resp.Header.Revision, 10)
	return r, nil
}

// Update replaces r only if it has not changed since it was read at
// r's ResourceVersion; otherwise it returns ErrConflict (or ErrNotFound).
func (c *Client) Update(ctx context.Context, r api.Resource) (api.Resource, error) {
	rev, err := revision(r)
	if err != nil {
		return nil, err
	}
	b, err := prepare(r)
	if err != nil {
		return nil, err
	}
	k, name := r.GetKind(), api.StoreName(r)
	key := Key(k, name)
	cmps, err := c.writeGuards(ctx, r, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.etcd.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(b))).
		Else(clientv3.OpGet(key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return nil, c.wrap(err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return nil, objErr(k, name, ErrNotFound)
		}
		return nil, objErr(k, name, ErrConflict)
	}
	r.Meta().ResourceVersion = strconv.FormatInt(resp.Header.Revision, 10)
	return r, nil
}

// Apply creates r, or replaces the current object of that name. The
// replace is still conditional on the revision just read, so a concurrent
// writer yields ErrConflict rather than a lost update.
func (c *Client) Apply(ctx context.Context, r api.Resource) (api.Resource, error) {
	cur, err := c.Get(ctx, r.GetKind(), api.StoreName(r))
	switch {
	case IsNotFound(err):
		r.Meta().ResourceVersion = ""
		out, err := c.Create(ctx, r)
		if errors.Is(err, ErrExists) {
			// Created by someone else since our read: that is a conflict.
			return nil, objErr(r.GetKind(), api.StoreName(r), ErrConflict)
		}
		return out, err
	case err != nil:
		// A record that does not decode is replaced, still only at
		// the revision just read: writing it again is how it is fixed.
		var ce *CorruptError
		if !errors.As(err, &ce) {
			return nil, err
		}
		log.WithError(err).WithField("key", Key(r.GetKind(), api.StoreName(r))).Warn("replacing a record that does not decode")
		r.Meta().ResourceVersion = strconv.FormatInt(ce.Revision, 10)
		return c.Update(ctx, r)
	}
	r.Meta().ResourceVersion = cur.Meta().ResourceVersion
	if r.Meta().CreationTimestamp == "" {
		r.Meta().CreationTimestamp = cur.Meta().CreationTimestamp
	}
	return c.Update(ctx, r)
}

// CorruptError is a stored record that does not decode as its kind
// (Get, Decode). Apply replaces one and Delete without a
// resourceVersion deletes one, each at the revision it was read at.
type CorruptError struct {
	Kind     api.Kind
	Revision int64  // the record's ModRevision
	Value    []byte // the stored bytes, when read (what can be salvaged)
	Err      error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("datastore: corrupt %s record: %v", e.Kind, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Get reads one resource.
func (c *Client) Get(ctx context.Context, k api.Kind, name string) (api.Resource, error) {
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.etcd.Get(ctx, Key(k, name))
	if err != nil {
		return nil, c.wrap(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, objErr(k, name, ErrNotFound)
	}
	return decode(k, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// List reads every resource of a kind, sorted by name, and the store
// revision it was read at.
func (c *Client) List(ctx context.Context, k api.Kind) ([]api.Resource, int64, error) {
	out, corrupt, rev, err := c.list(ctx, k, false)
	for _, cr := range corrupt {
		log.WithError(cr.Err).WithField("key", Key(k, cr.Name)).Warn("skipping unreadable record")
	}
	return out, rev, err
}

// CorruptRecord is a stored record that does not decode as its kind.
type CorruptRecord struct {
	Name  string // its store name
	Err   *CorruptError
	Value []byte // its stored bytes
}

// ListWithCorrupt is List that also returns, by name, the records that
// do not decode (List skips them), and takes as not decoding a record
// whose content names another object than its key (or none: "null",
// "{}"): routed writes every record under its own name.
func (c *Client) ListWithCorrupt(ctx context.Context, k api.Kind) ([]api.Resource, []CorruptRecord, int64, error) {
	return c.list(ctx, k, true)
}

// CheckName returns a CorruptError when r, decoded from the record of
// kind k named name at rev, names another object (or none).
func CheckName(k api.Kind, name string, r api.Resource, rev int64) error {
	if got := api.StoreName(r); got != name {
		return &CorruptError{Kind: k, Revision: rev, Err: fmt.Errorf("its content names %q, its key %q", got, name)}
	}
	return nil
}

func (c *Client) list(ctx context.Context, k api.Kind, checkNames bool) ([]api.Resource, []CorruptRecord, int64, error) {
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.etcd.Get(ctx, KindPrefix(k), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, 0, c.wrap(err)
	}
	out := make([]api.Resource, 0, len(resp.Kvs))
	var corrupt []CorruptRecord
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), KindPrefix(k))
		r, err := decode(k, kv.Value, kv.ModRevision)
		if err == nil && checkNames {
			err = CheckName(k, name, r, kv.ModRevision)
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			corrupt = append(corrupt, CorruptRecord{Name: name, Err: ce, Value: kv.Value})
			continue
		}
		if err != nil {
			log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable record")
			continue
		}
		out = append(out, r)
	}
	return out, corrupt, resp.Header.Revision, nil
}

// Delete removes a resource, only if it is still at resourceVersion.
// An empty resourceVersion deletes whatever version is current now.
func (c *Client) Delete(ctx context.Context, k api.Kind, name, resourceVersion string) error {
	if resourceVersion == "" {
		cur, err := c.Get(ctx, k, name)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			resourceVersion = strconv.FormatInt(ce.Revision, 10)
		case err != nil:
			return err
		default:
			resourceVersion = cur.Meta().ResourceVersion
		}
	}
	rev, err := parseRev(k, name, resourceVersion)
	if err != nil {
		return err
	}
	key := Key(k, name)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
	if k == api.KindTier {
		guard, err := c.tierUnusedGuard(ctx, name)
		if err != nil {
			return err
		}
		cmps = append(cmps, guard...)
	}
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.etcd.Txn(ctx).If(cmps...).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return c.wrap(err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count == 0 {
			return objErr(k, name, ErrNotFound)
		}
		return objErr(k, name, ErrConflict)
	}
	return nil
}

func parseRev(k api.Kind, name, resourceVersion string) (int64, error) {
	rev, err := strconv.ParseInt(resourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q: bad resourceVersion %q", ErrConflict, k, name, resourceVersion)
	}
	return rev, nil
}

// poolOverlapGuard checks p against the stored pools and returns a
// comparison that fails if any pool changes before the write commits, so
// two overlapping pools cannot be created concurrently.
func (c *Client) poolOverlapGuard(ctx context.Context, p *api.IPPool) (clientv3.Cmp, error) {
	list, rev, err := c.List(ctx, api.KindIPPool)
	if err != nil {
		return clientv3.Cmp{}, err
	}
	pools := make([]*api.IPPool, 0, len(list))
	for _, r := range list {
		pools = append(pools, r.(*api.IPPool))
	}
	if err := api.ValidatePoolAgainst(p, pools); err != nil {
		return clientv3.Cmp{}, err
	}
	prefix := KindPrefix(api.KindIPPool)
	return clientv3.Compare(clientv3.ModRevision(prefix).WithPrefix(), "<", rev+1), nil
}

// IsNotFound reports whether err means the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
