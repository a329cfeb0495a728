package datastore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterInfoKey holds the cluster's identity, like Calico's
// ClusterInformation.
const ClusterInfoKey = KeyPrefix + "clusterinformation/default"

// ClusterInfo identifies the datastore a cluster runs on. Nodes remember
// the GUID they first saw: a datastore without it, or with another one,
// was wiped or swapped, and they keep their dataplane as it is instead
// of following it.
type ClusterInfo struct {
	GUID string `json:"clusterGUID"`
	// DatastoreReady false tells every node to hold still (as Calico's
	// datastoreReady, e.g. during a migration or a restore).
	DatastoreReady bool      `json:"datastoreReady"`
	Created        time.Time `json:"created"`
	// AdoptUntil is set by `routedctl datastore reinit`: until then,
	// nodes that remember another GUID accept this one (the operator
	// declared this datastore the truth) instead of holding still. It is
	// a window, not a flag: a node of another cluster pointed at this
	// datastore by mistake later must still hold still.
	AdoptUntil time.Time `json:"adoptUntil,omitzero"`
	// Revision is the etcd revision the record was read at.
	Revision int64 `json:"-"`
	// ModRevision is the record's own, for a Fence's Identity.
	ModRevision int64 `json:"-"`
}

// Adoptable reports whether a node that remembers another identity may
// adopt this one now.
func (ci *ClusterInfo) Adoptable(now time.Time) bool { return now.Before(ci.AdoptUntil) }

// ErrNoClusterInfo means the datastore has no identity record.
var ErrNoClusterInfo = errors.New("datastore: no cluster identity (ClusterInformation) in the datastore")

// GetClusterInfo reads the identity; at rev > 0 as of that revision.
func (c *Client) GetClusterInfo(ctx context.Context, rev int64) (*ClusterInfo, error) {
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	cctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.etcd.Get(cctx, ClusterInfoKey, opts...)
	if err != nil {
		return nil, c.wrap(err)
	}
	if len(resp.Kvs) == 0 {
		return &ClusterInfo{Revision: resp.Header.Revision}, ErrNoClusterInfo
	}
	ci, err := DecodeClusterInfo(resp.Kvs[0].Value)
	if err != nil {
		return nil, err
	}
	ci.Revision, ci.ModRevision = resp.Header.Revision, resp.Kvs[0].ModRevision
	return ci, nil
}

// InitClusterInfo creates the identity if there is none, and returns the
// one in the datastore.
func (c *Client) InitClusterInfo(ctx context.Context) (*ClusterInfo, error) {
	// Read first: a read-only identity (a route reflector's etcd role)
	// may not even attempt the create, which etcd checks as a write.
	if ci, err := c.GetClusterInfo(ctx, 0); !errors.Is(err, ErrNoClusterInfo) {
		return ci, err
	}
	ci := ClusterInfo{GUID: newGUID(), DatastoreReady: true, Created: time.Now().UTC()}
	if err := c.putClusterInfo(ctx, ci, true); err != nil && !errors.Is(err, ErrExists) {
		return nil, err
	}
	return c.GetClusterInfo(ctx, 0)
}

// DefaultAdoptWindow is how long nodes adopt a re-initialised identity.
const DefaultAdoptWindow = 24 * time.Hour

// ReinitClusterInfo gives the datastore a new identity that every node
// held on it adopts within window: the operator accepts this datastore as
// it is.
func (c *Client) ReinitClusterInfo(ctx context.Context, window time.Duration) (*ClusterInfo, error) {
	if window <= 0 {
		return nil, fmt.Errorf("datastore: the adoption window must be positive, not %s", window)
	}
	now := time.Now().UTC()
	ci := ClusterInfo{GUID: newGUID(), DatastoreReady: true, Created: now, AdoptUntil: now.Add(window)}
	if err := c.putClusterInfo(ctx, ci, false); err != nil {
		return nil, err
	}
	return c.GetClusterInfo(ctx, 0)
}

// SetDatastoreReady sets the ready flag of the existing identity.
func (c *Client) SetDatastoreReady(ctx context.Context, ready bool) (*ClusterInfo, error) {
	ci, err := c.GetClusterInfo(ctx, 0)
	if err != nil {
		return nil, err
	}
	ci.DatastoreReady = ready
	if err := c.putClusterInfo(ctx, *ci, false); err != nil {
		return nil, err
	}
	return c.GetClusterInfo(ctx, 0)
}

func (c *Client) putClusterInfo(ctx context.Context, ci ClusterInfo, onlyIfAbsent bool) error {
	b, err := json.Marshal(ci)
	if err != nil {
		return err
	}
	cctx, cancel := c.Ctx(ctx)
	defer cancel()
	if !onlyIfAbsent {
		_, err := c.etcd.Put(cctx, ClusterInfoKey, string(b))
		return c.wrap(err)
	}
	resp, err := c.etcd.Txn(cctx).If(clientv3.Compare(clientv3.Version(ClusterInfoKey), "=", 0)).
		Then(clientv3.OpPut(ClusterInfoKey, string(b))).Commit()
	if err != nil {
		return c.wrap(err)
	}
	if !resp.Succeeded {
		return ErrExists
	}
	return nil
}

func newGUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
