package listcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// changes is the latest change of each key since the base: its
// revisions in memory, its value in a journal file. Kept in the heap,
// the values were up to MaxChanges (16 MiB then) of live objects scattered
// over the heap's pages between two writes, which at GOGC=50 is about
// 24 MiB more heap (scale-big's churn profiles, issue 36: 18 MB of
// etcd's decoded values held by the cache after 4 minutes of churn).
// What stays in memory is the key and about 50 bytes a key.
//
// A journal that cannot be created or written (a full disk, EIO, no
// file descriptors, a read-only remount) loses nothing: its values are
// read back (those still buffered from memory) and held on the heap,
// as before the journal, until the next write takes them; that write
// starts a new journal. Only a value that cannot be read back is lost,
// and then put fails (the cache stops, never writing a wrong value).
type changes struct {
	byKey map[string]change
	// size is the bytes of the latest changes' keys and values, checked
	// against MaxChanges.
	size int
	j    *journal // nil until the first value, and once held
	// held is the values on the heap (by key) once the journal failed:
	// nil until then, and then every value is here.
	held map[string][]byte
}

// change is what the file records of one key's latest change: where its
// value is in the journal (off -1: in changes.held) and its revisions,
// or its deletion (the watch's event is not kept).
type change struct {
	off                  int64
	n                    int
	create, mod, version int64
	deleted              bool
}

// errTooMuchHeld is a journal that failed and more changes held since
// than journalOpts.maxHeld.
var errTooMuchHeld = errors.New("listcache: too many changes held in memory while the journal cannot be written")

// journalOpts is what put needs of the cache.
type journalOpts struct {
	cachePath string // the journal is opened beside it
	maxHeld   int    // bounds size while values are held: past it put fails
	failed    func(error)
}

// put records ch as key's latest change, its value (unless a deletion)
// appended to the journal, which is opened at the first value. A
// journal that fails moves every value to the heap (o.failed says why,
// once); put fails only when a value is lost or more than o.maxHeld
// bytes would be held.
func (cs *changes) put(key string, ch change, value []byte, o journalOpts) error {
	if cs.byKey == nil {
		cs.byKey = map[string]change{}
	}
	if old, ok := cs.byKey[key]; ok {
		cs.size -= len(key) + old.n
		delete(cs.byKey, key)
		delete(cs.held, key)
	}
	if !ch.deleted {
		ch.n = len(value)
		if cs.held == nil {
			off, err := cs.appendJournal(o.cachePath, value)
			if err == nil {
				ch.off = off
			} else {
				o.failed(err)
				if err := cs.hold(); err != nil {
					return err
				}
			}
		}
		if cs.held != nil {
			ch.off = -1
			cs.held[key] = append([]byte(nil), value...)
		}
	}
	cs.byKey[key] = ch
	cs.size += len(key) + ch.n
	if cs.held != nil && cs.size > o.maxHeld {
		return fmt.Errorf("%w: %d bytes, more than %d", errTooMuchHeld, cs.size, o.maxHeld)
	}
	return nil
}

// appendJournal appends value to the journal, opened at the first one.
func (cs *changes) appendJournal(cachePath string, value []byte) (int64, error) {
	if cs.j == nil {
		j, err := openJournal(cachePath)
		if err != nil {
			return 0, err
		}
		cs.j = j
	}
	return cs.j.append(value)
}

// hold reads every value of the journal back onto the heap (the
// journal failed) and closes it; from then on values are held.
func (cs *changes) hold() error {
	held := map[string][]byte{}
	for k, ch := range cs.byKey {
		if ch.deleted || ch.n == 0 || ch.off < 0 {
			continue
		}
		v, err := cs.j.read(ch.off, ch.n, nil)
		if err != nil {
			return err
		}
		held[k] = v
		ch.off = -1
		cs.byKey[k] = ch
	}
	if cs.j != nil {
		cs.j.f.Close()
		cs.j = nil
	}
	cs.held = held
	return nil
}

// value reads ch's value into buf (grown as needed).
func (cs *changes) value(key string, ch change, buf []byte) ([]byte, error) {
	if ch.n == 0 {
		return buf[:0], nil
	}
	if ch.off < 0 {
		v, ok := cs.held[key]
		if !ok || len(v) != ch.n {
			return nil, fmt.Errorf("listcache: the value of %q is not held", key)
		}
		return append(buf[:0], v...), nil
	}
	return cs.j.read(ch.off, ch.n, buf)
}

// journalBytes is how much the journal holds, the values of changes
// later replaced included.
func (cs *changes) journalBytes() int64 {
	if cs.j == nil {
		return 0
	}
	return cs.j.off
}

// close frees the journal; cs is empty after it.
func (cs *changes) close() {
	if cs.j != nil {
		cs.j.f.Close()
	}
	*cs = changes{}
}

// journal is an append-only file of values: created beside the cache
// (the same file system, private to this process's user) and unlinked at
// once, so it never outlives the process, even killed, and never needs
// cleaning. It is read back only by the write that merges it, or when
// it fails. Its values not yet in the file are in buf, whole: a failed
// write to the file loses none of them.
type journal struct {
	f    *os.File
	buf  []byte // the values from base to off
	base int64  // bytes in the file
	off  int64  // bytes appended
}

// journalBuffer is what a journal gathers before a write to its file:
// a few dozen endpoints' values.
const journalBuffer = 32 << 10

func openJournal(cachePath string) (*journal, error) {
	// The name is one of the temporary files' (".<cache>.tmp-*"), which
	// a start removes, should a kill come between these two calls.
	f, err := os.CreateTemp(filepath.Dir(cachePath), "."+filepath.Base(cachePath)+".tmp-journal-")
	if err != nil {
		return nil, fmt.Errorf("listcache: opening the journal of changes: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("listcache: unlinking the journal of changes: %w", err)
	}
	return &journal{f: f, buf: make([]byte, 0, journalBuffer)}, nil
}

// append adds v, writing the buffer to the file when full. On an error
// v is appended all the same (in buf), and so are the values before.
func (j *journal) append(v []byte) (int64, error) {
	off := j.off
	j.buf = append(j.buf, v...)
	j.off += int64(len(v))
	if len(j.buf) < journalBuffer {
		return off, nil
	}
	// A write cut short (ENOSPC part way) leaves base where it was:
	// the next write, if any, writes the whole buffer again there.
	if _, err := j.f.WriteAt(j.buf, j.base); err != nil {
		return off, fmt.Errorf("listcache: writing the journal of changes: %w", err)
	}
	j.base = j.off
	if cap(j.buf) > 2*journalBuffer { // grown by one big value
		j.buf = make([]byte, 0, journalBuffer)
	} else {
		j.buf = j.buf[:0]
	}
	return off, nil
}

// read returns the n bytes at off, from the file or from buf; a value
// is never split between them.
func (j *journal) read(off int64, n int, buf []byte) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if off >= j.base {
		copy(buf, j.buf[off-j.base:])
		return buf, nil
	}
	if _, err := j.f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("listcache: reading the journal of changes at %d (%d bytes): %w", off, n, err)
	}
	return buf, nil
}
