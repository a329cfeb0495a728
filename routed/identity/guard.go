// Package identity is the node's datastore-identity guard: it keeps felix
// and the BGP speaker from following a datastore that was wiped, swapped
// for another cluster's, rolled back to an older backup, or marked not
// ready.
//
// Each node remembers the cluster's identity (datastore.ClusterInfo) and
// the highest revision it saw, in its state directory. The node feed asks
// the Guard (feed.Gate) about every list and every change of the identity;
// while the datastore disagrees the feed holds every consumer: what they
// programmed and advertise stays as it is, readiness says why, and the log
// says what to do. When the datastore is restored, or the operator
// re-initialises it (`routedctl datastore reinit`), the feed lets go with
// a fresh snapshot. The guard reads etcd only at start (Start); the work
// a node does before it follows the datastore again (BeforeTrust) runs
// off the feed's goroutine, under the daemon's context (Run).
package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/atomicfile"
	"github.com/routed-net/routed/pkg/datastore"
)

var log = logrus.WithField("component", "identity")

// Guard judges the datastore; safe for concurrent use.
type Guard struct {
	ds        *datastore.Client
	stateFile string

	mu     sync.Mutex
	guid   string
	maxRev int64
	saved  time.Time
	frozen bool
	reason string
	// rolledBack is set once the datastore went back in time and stays
	// until the operator accepts it (reinit): a rolled-back datastore
	// whose revision later catches up, through unrelated writes, still
	// lacks what the node saw.
	rolledBack bool
	// trust is the work a held node does before it follows the
	// datastore again (trust.go).
	trust trust
}

// state is what a node keeps on disk about its cluster.
type state struct {
	GUID       string `json:"clusterGUID"`
	MaxRev     int64  `json:"maxRevision"`
	RolledBack bool   `json:"rolledBack,omitempty"`
}

// New returns a Guard keeping its state in stateDir/cluster-identity.
func New(ds *datastore.Client, stateDir string) *Guard {
	return &Guard{ds: ds, stateFile: filepath.Join(stateDir, "cluster-identity"),
		trust: trust{retry: trustRetry, timeout: trustTimeout}}
}

// Start loads what this node remembers and checks the datastore once: a
// node that remembers nothing initialises an empty datastore's identity
// or learns the existing one. It returns datastore.ErrUnavailable (to
// retry) when etcd cannot be reached.
func (g *Guard) Start(ctx context.Context) error {
	if b, err := os.ReadFile(g.stateFile); err == nil {
		var st state
		if err := json.Unmarshal(b, &st); err == nil {
			g.guid, g.maxRev, g.rolledBack = st.GUID, st.MaxRev, st.RolledBack
		}
	}
	if g.guid == "" {
		ci, err := g.ds.InitClusterInfo(ctx)
		if err != nil {
			return err
		}
		g.mu.Lock()
		g.guid = ci.GUID
		g.mu.Unlock()
		g.Save()
		log.WithField("clusterGUID", ci.GUID).Info("cluster identity learnt")
	}
	return g.Check(ctx)
}

// Check reads the identity and judges it now (start-up and tools; the
// feed judges what it delivers without reading).
func (g *Guard) Check(ctx context.Context) error {
	ci, err := g.ds.GetClusterInfo(ctx, 0)
	switch {
	case errors.Is(err, datastore.ErrNoClusterInfo):
		g.Admit(nil, ci.Revision)
	case err != nil:
		return err
	default:
		g.Admit(ci, ci.Revision)
	}
	return nil
}

// ClusterGUID returns the identity of the cluster this node follows (or,
// while it holds, last followed).
func (g *Guard) ClusterGUID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.guid
}

// Frozen reports whether the feed is held, and why.
func (g *Guard) Frozen() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen && g.reason == reasonTrusting {
		return true, g.trust.reasonLocked(time.Now())
	}
	return g.frozen, g.reason
}

// Admit implements feed.Gate: it judges the datastore whose identity is
// ci (nil: none) at revision rev, freezes when it is wrong, and reports
// whether consumers may follow it. It never waits for etcd: the work a
// held node does before it follows the datastore again runs on its own
// goroutine (trust.go), and Admit holds until it has succeeded.
func (g *Guard) Admit(ci *datastore.ClusterInfo, rev int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	why := g.judgeLocked(ci, rev)
	if why != "" {
		g.abandonTrustLocked()
	} else if g.frozen && g.trust.hook != nil {
		why = g.trustLocked()
	}
	if why != "" {
		if (!g.frozen || g.reason != why) && why != reasonTrusting {
			log.Error("holding the dataplane and BGP as they are: " + why)
		}
		g.frozen, g.reason = true, why
		return false
	}
	if g.frozen {
		log.Warn("the datastore is trusted again: resyncing felix and BGP from it")
		g.frozen, g.reason = false, ""
	}
	g.seenLocked(rev)
	return true
}

// judgeLocked returns why the datastore whose identity is ci at revision
// rev is not to be followed ("" when it is), adopting a re-initialised
// identity.
func (g *Guard) judgeLocked(ci *datastore.ClusterInfo, rev int64) string {
	var why string
	switch {
	case ci == nil:
		why = "the datastore has no cluster identity: etcd was wiped or replaced, or routed points at the wrong etcd. " +
			"Restore etcd from a backup (routed resumes by itself), or accept this datastore with `routedctl datastore reinit`"
	case ci.GUID != g.guid && ci.Adoptable(time.Now()):
		log.WithFields(logrus.Fields{"from": g.guid, "to": ci.GUID}).Warn("adopting the re-initialised datastore's identity")
		g.guid, g.maxRev, g.rolledBack = ci.GUID, rev, false
		g.saveLocked(true)
	case ci.GUID != g.guid:
		why = fmt.Sprintf("the datastore belongs to another cluster (identity %q, this node's cluster is %s): routed points at the wrong etcd, or it was replaced. "+
			"Point routed back at its etcd, or accept this one with `routedctl datastore reinit`", ci.GUID, g.guid)
		if !ci.AdoptUntil.IsZero() {
			why += fmt.Sprintf(" (it was re-initialised, but nodes could adopt it only until %s)", ci.AdoptUntil.UTC().Format(time.RFC3339))
		}
	case !ci.DatastoreReady:
		why = "the datastore is marked not ready (datastoreReady: false); `routedctl datastore set-ready true` when the work on it is done"
	case rev < g.maxRev || g.rolledBack:
		if !g.rolledBack {
			g.rolledBack = true
			g.saveLocked(true)
		}
		why = fmt.Sprintf("the datastore went back in time (revision %d, this node saw %d): it was restored from a backup. "+
			"Accept it with `routedctl datastore reinit` (docs/etcd-restore.md; this node first puts back the pods it runs "+
			"that the backup lacks: `routedctl ipam reimport --dry-run` lists them)", rev, g.maxRev)
	}
	return why
}

// Seen implements feed.Gate: it records a revision delivered.
func (g *Guard) Seen(rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seenLocked(rev)
}

func (g *Guard) seenLocked(rev int64) {
	if rev > g.maxRev {
		g.maxRev = rev
		g.saveLocked(false)
	}
}

// Save writes the state file now (at stop).
func (g *Guard) Save() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.saveLocked(true)
}

// saveLocked writes the state file, at most every 30 s unless forced.
func (g *Guard) saveLocked(force bool) {
	if !force && time.Since(g.saved) < 30*time.Second {
		return
	}
	b, _ := json.Marshal(state{GUID: g.guid, MaxRev: g.maxRev, RolledBack: g.rolledBack})
	if err := os.MkdirAll(filepath.Dir(g.stateFile), 0o755); err != nil {
		log.WithError(err).Warn("cannot save the cluster identity")
		return
	}
	if err := atomicfile.Write(g.stateFile, b, 0o644); err != nil {
		log.WithError(err).Warn("cannot save the cluster identity")
		return
	}
	g.saved = time.Now()
}
