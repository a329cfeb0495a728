// Package listcache keeps a node-local copy of what the node feed's
// stream lists (datastore.StreamCache), so that a restarted routed
// starts from it instead of listing the whole datastore: the stream
// checks the copy is for the same etcd cluster and history, brings it up
// to etcd's revision at start with the watch, and only then delivers it.
//
// The copy is one file (mode 0600, in the node's state directory),
// replaced atomically (temporary file, fsync, rename): a base, the
// listed keys at one revision, sorted by key, with a CRC-32C. Changes
// seen since are kept, the latest per key (the keys and revisions in
// memory, the values in an unlinked journal file beside it, or in
// memory while it cannot be written), and merged into a new file in
// one pass over the old one: every Period, when they pass MaxChanges
// bytes, and when the node stops. No list is ever held here: a list
// from etcd is written to a temporary file page by page as the stream
// reads it (made durable and renamed into place by Run), and a loaded
// file is checked in one pass that keeps nothing, then read again key
// by key when the stream delivers it.
package listcache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// Defaults of Options.
const (
	DefaultPeriod = 3 * time.Minute
	// DefaultMaxChanges: at scale-big's churn (200 pod writes a second,
	// 150,000 pods) 8 MiB of changes is 16,000 keys, 3.5 MiB of live
	// heap, and a write every 81 s of 170 ms of CPU; 16 MiB held twice
	// that (7.0 MiB) for a write every 161 s; 4 MiB, 1.8 MiB for a write
	// of the whole file (about 200 MB) every 41 s (BenchmarkChangesHeld).
	DefaultMaxChanges = 8 << 20
	DefaultMaxAge     = time.Hour
	// DefaultWriteRate spreads a write of a 150,000-pod cluster's file
	// (about 200 MB) over about 6 s.
	DefaultWriteRate = 32 << 20
	// finalSaveLimit bounds the save when the node stops: within the
	// daemon's default shutdown grace (10 s).
	finalSaveLimit = 8 * time.Second
)

// Options configure a Cache; Path is required.
type Options struct {
	// Path is the cache file.
	Path string
	// Period is how often changes are written (0: DefaultPeriod).
	Period time.Duration
	// MaxChanges is how many bytes of changes are kept before they are
	// written early (0: DefaultMaxChanges); so is a journal of values
	// past 4 times that (the same keys changing again and again). While
	// the journal cannot be written, at most twice that is held in
	// memory.
	MaxChanges int
	// MaxAge: a file written longer ago is not used (0: DefaultMaxAge).
	MaxAge time.Duration
	// WriteRate bounds the bytes a second of the writes while the node
	// runs (0: DefaultWriteRate; negative: unbounded).
	WriteRate int
}

// Cache is a datastore.StreamCache on a file. Its watch-side methods
// only take the lock for map updates; a list's pages are written to
// their file as they come; Run does the rest of the I/O.
type Cache struct {
	opt Options
	log *logrus.Entry
	m   metrics

	kick chan struct{}

	mu sync.Mutex
	// What the stream saw: a base (on disk, or a list written but not
	// yet in place: pending) plus the changes since, up to rev. valid
	// is false until a list or a usable file, and after the stream
	// discarded the file.
	valid    bool
	gen      uint64     // bumped by every new base
	listing  *listWrite // a list being written as it is read
	pending  *listWrite // a list written whole, for Run to put in place
	stopped  bool       // Run has returned: nothing more is written
	hdr      header     // the base's range and cluster; Revision: the base's
	changes  changes
	rev      int64 // base + changes are the range at rev
	savedRev int64 // the revision of the file on disk (0: none usable)

	// mergeCopies makes write read the file as it did before issue 36's
	// churn profiles (a copy of every record): only
	// BenchmarkMergeWrite's baseline sets it.
	mergeCopies bool
	// committing, when set, is called by commitPending with the list
	// it took, before putting it in place: only TestListDuringCommit
	// sets it.
	committing func(*listWrite)
}

// New returns a Cache on opt.Path; nothing is read until Load.
func New(opt Options) (*Cache, error) {
	if opt.Path == "" {
		return nil, errors.New("listcache: no path given")
	}
	if opt.Period <= 0 {
		opt.Period = DefaultPeriod
	}
	if opt.MaxChanges <= 0 {
		opt.MaxChanges = DefaultMaxChanges
	}
	if opt.MaxAge <= 0 {
		opt.MaxAge = DefaultMaxAge
	}
	if opt.WriteRate == 0 {
		opt.WriteRate = DefaultWriteRate
	}
	return &Cache{opt: opt, log: logrus.WithFields(logrus.Fields{"component": "feed cache", "path": opt.Path}),
		m: newMetrics(), kick: make(chan struct{}, 1)}, nil
}

// Path is the cache file.
func (c *Cache) Path() string { return c.opt.Path }

// Collectors are the cache's Prometheus metrics.
func (c *Cache) Collectors() []prometheus.Collector { return c.m.all() }

// Load implements datastore.StreamCache: it reads the whole file once,
// keeping nothing of it, and returns it when it is intact, recent and
// for exactly this range; the file stays open for the stream to read it
// again when it delivers it (a later write replaces the path, not this
// file).
func (c *Cache) Load(prefix string, parts []string, probeKey string) (datastore.CachedList, bool) {
	start := time.Now()
	want := header{Version: formatVers, Prefix: prefix, Parts: slices.Clone(parts), ProbeKey: probeKey}
	c.mu.Lock()
	c.hdr = want
	c.mu.Unlock()
	c.removeStaleTemps()
	cl, h, err := c.check(want)
	if err != nil {
		reason := "unreadable"
		switch {
		case errors.Is(err, fs.ErrNotExist):
			reason = "absent"
		case errors.Is(err, errCorrupt):
			reason = "corrupt"
		case errors.Is(err, errNotPrivate):
			reason = "not private"
		case errors.Is(err, errOtherRange):
			reason = "other range"
		case errors.Is(err, errTooOld):
			reason = "too old"
		}
		c.m.fallbacks.WithLabelValues(reason).Inc()
		lg := c.log.WithError(err).WithField("reason", reason)
		if reason == "absent" {
			lg.Info("no cache of the datastore: listing it")
		} else {
			lg.Warn("discarding the cache of the datastore: listing it")
		}
		return datastore.CachedList{}, false
	}
	c.mu.Lock()
	c.valid, c.gen, c.hdr = true, c.gen+1, h
	c.changes.close()
	c.rev, c.savedRev = h.Revision, h.Revision
	c.mu.Unlock()
	c.log.WithFields(logrus.Fields{"revision": h.Revision, "keys": cl.Keys, "written": time.Unix(h.Written, 0).UTC(),
		"took": time.Since(start).Round(time.Millisecond)}).Info("read the cache of the datastore")
	return cl, true
}

// removeStaleTemps removes temporary files a write cut short (the process
// killed in the middle) left beside the cache.
func (c *Cache) removeStaleTemps() {
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(c.opt.Path), "."+filepath.Base(c.opt.Path)+".tmp-*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
}

var (
	errOtherRange = errors.New("listcache: written for another range")
	errTooOld     = errors.New("listcache: too old")
)

// check reads and checks the whole file against want, keeping only its
// count and the probe key's revision, and returns it open for reading
// again.
func (c *Cache) check(want header) (datastore.CachedList, header, error) {
	f, size, err := openPrivate(c.opt.Path)
	if err != nil {
		return datastore.CachedList{}, header{}, err
	}
	cl, h, err := checkFile(f, size, want, c.opt.MaxAge)
	if err != nil {
		f.Close()
		return datastore.CachedList{}, h, err
	}
	var once sync.Once
	cl.Close = func() { once.Do(func() { f.Close() }) }
	cl.Read = func(yield func(*mvccpb.KeyValue, error) bool) {
		fl, err := readFrom(f, size)
		if err != nil {
			yield(nil, err)
			return
		}
		for fl.next() {
			kv := fl.kv
			if !inParts(kv.Key, want) {
				yield(nil, fmt.Errorf("%w: key %q outside the range", errCorrupt, kv.Key))
				return
			}
			if !yield(&kv, nil) {
				return
			}
		}
		if err := fl.verify(); err != nil {
			yield(nil, err)
		}
	}
	return cl, h, nil
}

// checkFile reads f whole: its header against want and maxAge, every
// record in the range and in order, the count and the checksum.
func checkFile(f *os.File, size int64, want header, maxAge time.Duration) (datastore.CachedList, header, error) {
	fl, err := readFrom(f, size)
	if err != nil {
		return datastore.CachedList{}, header{}, err
	}
	h := fl.h
	if err := sameRange(h, want); err != nil {
		return datastore.CachedList{}, h, err
	}
	if age := time.Since(time.Unix(h.Written, 0)); age > maxAge {
		return datastore.CachedList{}, h, fmt.Errorf("%w: written %s ago, more than %s", errTooOld, age.Round(time.Second), maxAge)
	}
	if h.ClusterID == 0 || h.Revision <= 0 {
		return datastore.CachedList{}, h, fmt.Errorf("%w: no cluster or revision in the header", errCorrupt)
	}
	cl := datastore.CachedList{Revision: h.Revision, ClusterID: h.ClusterID}
	fl.reuse = true // the check keeps nothing of a record
	for fl.next() {
		if !inParts(fl.kv.Key, want) {
			return datastore.CachedList{}, h, fmt.Errorf("%w: key %q outside the range", errCorrupt, fl.kv.Key)
		}
		if string(fl.kv.Key) == want.ProbeKey {
			cl.ProbeRev = fl.kv.ModRevision
		}
		cl.Keys++
	}
	if err := fl.verify(); err != nil {
		return datastore.CachedList{}, h, err
	}
	return cl, h, nil
}

func sameRange(h, want header) error {
	if h.Prefix != want.Prefix || h.ProbeKey != want.ProbeKey || !slices.Equal(h.Parts, want.Parts) {
		return fmt.Errorf("%w: prefix %q, parts %q, probe %q; this stream lists prefix %q, parts %q, probe %q", errOtherRange,
			h.Prefix, h.Parts, h.ProbeKey, want.Prefix, want.Parts, want.ProbeKey)
	}
	return nil
}

func inParts(key []byte, h header) bool {
	if len(h.Parts) == 0 {
		return hasPrefix(key, h.Prefix)
	}
	for _, p := range h.Parts {
		if hasPrefix(key, p) {
			return true
		}
	}
	return false
}

// hasPrefix is strings.HasPrefix(string(key), p) without converting the
// key: that conversion, a call's argument, copied every key longer than
// 32 bytes to the heap, for every part tried, on every watch event
// (20 MB in 4 minutes of scale-big's churn).
func hasPrefix(key []byte, p string) bool {
	return len(key) >= len(p) && string(key[:len(p)]) == p
}

// ListStarted implements datastore.StreamCache: the list is written to a
// temporary file as it is read; the cache has no base until it is whole.
func (c *Cache) ListStarted(rev int64, clusterID uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abortLocked()
	c.valid = false
	c.changes.close()
	if c.stopped {
		return
	}
	h := c.hdr
	h.ClusterID, h.Revision, h.Written = clusterID, rev, time.Now().Unix()
	lw, err := startList(c.opt.Path, h)
	if err != nil {
		c.m.saveFailures.Inc()
		c.log.WithError(err).Warn("could not start writing the list to the cache of the datastore (no cache until the next list)")
		return
	}
	c.listing = lw
}

// ListPage implements datastore.StreamCache: the keys are written to the
// list's file (not kept).
func (c *Cache) ListPage(kvs []*mvccpb.KeyValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listing == nil {
		return
	}
	for _, kv := range kvs {
		if !inParts(kv.Key, c.listing.hdr) {
			continue
		}
		if err := c.listing.fw.record(kv); err != nil {
			c.m.saveFailures.Inc()
			c.log.WithError(err).Warn("could not write the list to the cache of the datastore (no cache until the next list)")
			c.abortLocked()
			return
		}
	}
}

// Listed implements datastore.StreamCache: the list's file, written
// whole, becomes the base; Run makes it durable and puts it in place.
func (c *Cache) Listed(rev int64, clusterID uint64) {
	c.mu.Lock()
	lw := c.listing
	c.listing = nil
	if lw == nil || lw.hdr.Revision != rev || lw.hdr.ClusterID != clusterID {
		c.mu.Unlock()
		lw.abort()
		return
	}
	if err := lw.fw.finish(); err != nil {
		c.m.saveFailures.Inc()
		c.log.WithError(err).Warn("could not write the list to the cache of the datastore (no cache until the next list)")
		c.mu.Unlock()
		lw.abort()
		return
	}
	c.pending.abort()
	c.valid, c.gen, c.pending = true, c.gen+1, lw
	c.hdr.ClusterID, c.hdr.Revision = clusterID, rev
	c.changes.close()
	c.rev, c.savedRev = rev, 0
	c.mu.Unlock()
	c.wake()
}

// abortLocked drops a list being written and one not yet in place;
// c.mu is held.
func (c *Cache) abortLocked() {
	c.listing.abort()
	c.pending.abort()
	c.listing, c.pending = nil, nil
}

// Changed implements datastore.StreamCache. Nothing is kept once Run
// returned (nothing would write it).
func (c *Cache) Changed(evs []*clientv3.Event, rev int64) {
	c.mu.Lock()
	if !c.valid || c.stopped {
		c.mu.Unlock()
		return
	}
	for _, ev := range evs {
		if !inParts(ev.Kv.Key, c.hdr) {
			continue
		}
		ch := change{deleted: ev.Type == clientv3.EventTypeDelete}
		if !ch.deleted {
			ch.create, ch.mod, ch.version = ev.Kv.CreateRevision, ev.Kv.ModRevision, ev.Kv.Version
		}
		if err := c.changes.put(string(ev.Kv.Key), ch, ev.Kv.Value, c.journalOpts()); err != nil {
			c.lostChangesLocked(err)
			c.mu.Unlock()
			return
		}
	}
	c.rev = rev
	early := c.changes.size > c.opt.MaxChanges || c.changes.journalBytes() > 4*int64(c.opt.MaxChanges)
	c.mu.Unlock()
	if early {
		c.wake()
	}
}

// maxHeldFactor bounds the changes held on the heap while the journal
// cannot be written: MaxChanges asks for a write, the rest is room for
// the changes that come while writes fail too.
const maxHeldFactor = 2

// journalOpts are the cache's for changes.put.
func (c *Cache) journalOpts() journalOpts {
	return journalOpts{cachePath: c.opt.Path, maxHeld: maxHeldFactor * c.opt.MaxChanges, failed: c.journalFailed}
}

// journalFailed says the journal failed and the changes are held on the
// heap until the next write, which starts a new journal.
func (c *Cache) journalFailed(err error) {
	c.m.saveFailures.Inc()
	c.log.WithError(err).Warn("could not keep the datastore's changes in the journal: they stay in memory until the next write of the cache")
}

// lostChangesLocked stops the cache's updates: a change's value could
// not be kept (a journal that fails to read back what it holds, or too
// many changes held in memory while it cannot be written). The file on
// disk stays as it is (a base at an older revision, which a restart
// catches up from); this run records nothing more until the next list.
// c.mu is held.
func (c *Cache) lostChangesLocked(err error) {
	c.m.saveFailures.Inc()
	c.log.WithError(err).Warn("could not keep the datastore's changes for the cache (no cache updates until the next list)")
	c.valid = false
	c.changes.close()
}

// Discarded implements datastore.StreamCache.
func (c *Cache) Discarded(reason datastore.ListReason) {
	c.m.fallbacks.WithLabelValues(string(reason)).Inc()
	c.mu.Lock()
	c.valid = false
	c.changes.close()
	c.mu.Unlock()
}

// HistoryLost implements datastore.StreamCache: what the cache holds
// (the changes, a list not yet in place) is of a history etcd no longer
// has, and nothing more of it is written until the next list. A write
// under way keeps nothing of what it wrote (a new generation); the file
// on disk stays as it is, and a restart's resume checks judge it as
// they judge any file.
func (c *Cache) HistoryLost(reason datastore.ListReason) {
	c.mu.Lock()
	c.abortLocked()
	c.valid, c.gen = false, c.gen+1
	c.changes.close()
	c.mu.Unlock()
	c.log.WithField("reason", reason).Warn("the datastore's history the cache follows is gone; nothing more is written until the next list")
}

// Restored implements datastore.StreamCache.
func (c *Cache) Restored(rev int64, took time.Duration) {
	c.m.restores.Inc()
	c.m.catchUp.Set(took.Seconds())
}

func (c *Cache) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// minGap is the least time between two writes for changes alone (a new
// list is put in place at once).
const minGap = 30 * time.Second

// Run writes the cache every Period, early when asked (a new list, many
// changes), and once more when ctx ends (the node stops: the next start
// needs only what changed meanwhile). It returns after that last write.
func (c *Cache) Run(ctx context.Context) error {
	t := time.NewTicker(c.opt.Period)
	defer t.Stop()
	var last time.Time
	var later <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), finalSaveLimit)
			err := c.save(fctx, false)
			cancel()
			if err != nil {
				c.log.WithError(err).Warn("could not write the cache of the datastore on the way out")
			}
			c.mu.Lock()
			c.stopped = true
			c.abortLocked()   // a list cut short by the stop
			c.changes.close() // the changes since the last write, and their journal
			c.mu.Unlock()
			return nil
		case <-t.C:
		case <-later:
			later = nil
		case <-c.kick:
			c.mu.Lock()
			newBase := c.pending != nil
			c.mu.Unlock()
			if wait := minGap - time.Since(last); !newBase && wait > 0 {
				if later == nil {
					later = time.After(wait)
				}
				continue
			}
		}
		last = time.Now()
		if err := c.save(ctx, true); err != nil && ctx.Err() == nil {
			c.log.WithError(err).Warn("could not write the cache of the datastore")
		}
	}
}
