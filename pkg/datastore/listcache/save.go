package listcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/routed-net/routed/internal/atomicfile"
)

// save puts a new list's file in place (made durable, renamed over the
// cache), then writes the base with the changes taken so far as the new
// file. Changes that arrive meanwhile are kept for the next save. A
// paced save writes at most WriteRate bytes a second, so a big
// cluster's file does not take a core in bursts while the node runs
// (the save on the way out is not paced).
func (c *Cache) save(ctx context.Context, paced bool) error {
	for {
		if err := c.commitPending(); err != nil {
			return err
		}
		c.mu.Lock()
		if c.pending == nil {
			break
		}
		// A list finished while the one before it was put in place
		// (outside the lock): it is the base now, the changes held are
		// its, and the file is not; put it in place first (merging
		// into the older file failed its revision check, and the cache
		// followed nothing more until the next list).
		c.mu.Unlock()
	}
	if !c.valid || c.rev == c.savedRev {
		c.mu.Unlock()
		return nil
	}
	gen, hdr, taken, rev := c.gen, c.hdr, c.changes, c.rev
	c.changes = changes{}
	c.mu.Unlock()
	defer taken.close() // after putBack took what it needs

	start := time.Now()
	baseRev := hdr.Revision
	hdr.Revision, hdr.Written = rev, start.Unix()
	n, size, err := c.write(ctx, hdr, baseRev, taken, c.pacer(paced))

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return err // a new base replaced this one meanwhile
	}
	if err != nil && ctx.Err() != nil {
		// Cut short (the node stops while a paced write runs): nothing
		// is lost, the write on the way out takes it all.
		c.putBack(&taken)
		return err
	}
	if err != nil {
		c.m.saveFailures.Inc()
		if errors.Is(err, errCorrupt) || errors.Is(err, errNotPrivate) || errors.Is(err, errOtherRange) {
			// The base is lost (a file that no longer reads): nothing
			// to build on until the next list.
			c.valid, c.savedRev = false, 0
			c.changes.close()
			return fmt.Errorf("%w (no cache until the next list)", err)
		}
		c.putBack(&taken)
		return err
	}
	c.savedRev, c.hdr.Revision = rev, rev
	c.m.saves.Inc()
	c.m.size.Set(float64(size))
	c.m.saveSeconds.Observe(time.Since(start).Seconds())
	c.log.WithFields(logrus.Fields{"revision": rev, "keys": n, "changes": len(taken.byKey), "bytes": size,
		"took": time.Since(start).Round(time.Millisecond)}).Debug("wrote the cache of the datastore")
	return nil
}

// commitPending puts a list written whole in place, as the base on disk.
func (c *Cache) commitPending() error {
	c.mu.Lock()
	lw, gen := c.pending, c.gen
	c.pending = nil
	c.mu.Unlock()
	if lw == nil {
		return nil
	}
	if c.committing != nil {
		c.committing(lw)
	}
	start := time.Now()
	size, err := lw.commit(c.opt.Path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		// A new list replaced this one meanwhile: whether this one
		// went in place or not, save puts that one in place next.
		if err != nil {
			c.m.saveFailures.Inc()
		}
		return nil
	}
	if err != nil {
		// The base is lost: nothing to build on until the next list.
		c.m.saveFailures.Inc()
		c.valid, c.savedRev = false, 0
		c.changes.close()
		return fmt.Errorf("%w (no cache until the next list)", err)
	}
	c.savedRev = lw.hdr.Revision
	c.m.saves.Inc()
	c.m.size.Set(float64(size))
	c.m.saveSeconds.Observe(time.Since(start).Seconds())
	c.log.WithFields(logrus.Fields{"revision": lw.hdr.Revision, "bytes": size, "took": time.Since(start).Round(time.Millisecond)}).
		Debug("put the list in place as the cache of the datastore")
	return nil
}

// putBack returns changes a failed write took to the pending ones (the
// later changes win), their values copied to the pending ones' journal
// (or held in memory when it cannot be written, as in Changed); c.mu is
// held. A value that cannot be read back stops the cache's updates, as
// in Changed.
func (c *Cache) putBack(old *changes) {
	var buf []byte
	o := c.journalOpts()
	for k, ch := range old.byKey {
		if _, ok := c.changes.byKey[k]; ok {
			continue
		}
		v, err := old.value(k, ch, buf)
		if err == nil {
			buf = v
			err = c.changes.put(k, ch, v, o)
		}
		if err != nil {
			c.lostChangesLocked(err)
			return
		}
	}
}

// write replaces the file with itself (at baseRev) merged with changes;
// it returns the keys and bytes written.
func (c *Cache) write(ctx context.Context, hdr header, baseRev int64, chs changes, pace func(context.Context, int) error) (int, int64, error) {
	disk, err := openFile(c.opt.Path)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the cache to merge into it: %w", err)
	}
	defer disk.f.Close()
	if err := sameRange(disk.h, hdr); err != nil {
		return 0, 0, err
	}
	if disk.h.Revision != baseRev || disk.h.ClusterID != hdr.ClusterID {
		return 0, 0, fmt.Errorf("%w: the file is at revision %d of cluster %x, this cache wrote %d of %x", errCorrupt,
			disk.h.Revision, disk.h.ClusterID, baseRev, hdr.ClusterID)
	}
	// Each record of the file is written out before the next is read:
	// one pair of buffers serves them all.
	disk.reuse = !c.mergeCopies
	next := func() (*mvccpb.KeyValue, bool) {
		if !disk.next() {
			return nil, false
		}
		if disk.reuse {
			return &disk.kv, true
		}
		kv := disk.kv
		return &kv, true
	}
	keys := make([]string, 0, len(chs.byKey))
	for k := range chs.byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	var written int
	var keyBuf, val []byte // a changed key's record, written before the next is read
	err = atomicfile.Replace(c.opt.Path, 0o600, func(w io.Writer) error {
		fw, err := newWriter(w, hdr)
		if err != nil {
			return err
		}
		emit := func(kv *mvccpb.KeyValue) error {
			written++
			if written%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			if err := pace(ctx, len(kv.Key)+len(kv.Value)); err != nil {
				return err
			}
			return fw.record(kv)
		}
		kv, ok := next()
		for _, k := range keys {
			for ok && string(kv.Key) < k {
				if err := emit(kv); err != nil {
					return err
				}
				kv, ok = next()
			}
			if ok && string(kv.Key) == k {
				kv, ok = next() // replaced or deleted
			}
			if ch := chs.byKey[k]; !ch.deleted {
				if val, err = chs.value(k, ch, val); err != nil {
					return err
				}
				keyBuf = append(keyBuf[:0], k...)
				kv := &mvccpb.KeyValue{Key: keyBuf, Value: val, CreateRevision: ch.create, ModRevision: ch.mod, Version: ch.version}
				if err := emit(kv); err != nil {
					return err
				}
			}
		}
		for ; ok; kv, ok = next() {
			if err := emit(kv); err != nil {
				return err
			}
		}
		// The old file must have read whole and intact before the new
		// one replaces it.
		if err := disk.verify(); err != nil {
			return err
		}
		return fw.finish()
	})
	if err != nil {
		return 0, 0, err
	}
	syncDir(filepath.Dir(c.opt.Path))
	st, err := os.Stat(c.opt.Path)
	if err != nil {
		return 0, 0, err
	}
	return written, st.Size(), nil
}

// syncDir makes a rename in dir durable; a failure only weakens that.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// pacer returns what write calls for each record's bytes: when paced, it
// sleeps whenever the write is ahead of WriteRate (checked every MiB).
func (c *Cache) pacer(paced bool) func(context.Context, int) error {
	if !paced || c.opt.WriteRate < 0 {
		return func(context.Context, int) error { return nil }
	}
	start, done, next := time.Now(), 0, 1<<20
	return func(ctx context.Context, n int) error {
		done += n
		if done < next {
			return nil
		}
		next = done + 1<<20
		ahead := time.Duration(float64(done)/float64(c.opt.WriteRate)*float64(time.Second)) - time.Since(start)
		if ahead <= 0 {
			return nil
		}
		t := time.NewTimer(ahead)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
}
