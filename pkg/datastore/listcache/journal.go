package listcache

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
)

// changes is the latest change of each key since the base: its
// revisions in memory, its value in a journal file. Kept in the heap,
// the values were up to MaxChanges (16 MiB) of live objects scattered
// over the heap's pages between two writes, which at GOGC=50 is about
// 24 MiB more heap (scale-big's churn profiles, issue 36: 18 MB of
// etcd's decoded values held by the cache after 4 minutes of churn).
// What stays in memory is the key and about 50 bytes a key.
type changes struct {
	byKey map[string]change
	// size is the bytes of the latest changes' keys and values, checked
	// against MaxChanges.
	size int
	j    *journal // nil until the first value
}

// change is what the file records of one key's latest change: where its
// value is in the journal and its revisions, or its deletion (the
// watch's event is not kept).
type change struct {
	off                  int64
	n                    int
	create, mod, version int64
	deleted              bool
}

// put records ch as key's latest change, its value (unless a deletion)
// appended to the journal, which is opened beside cachePath at the
// first value.
func (cs *changes) put(cachePath, key string, ch change, value []byte) error {
	if !ch.deleted {
		if cs.j == nil {
			j, err := openJournal(cachePath)
			if err != nil {
				return err
			}
			cs.j = j
		}
		off, err := cs.j.append(value)
		if err != nil {
			return err
		}
		ch.off, ch.n = off, len(value)
	}
	if cs.byKey == nil {
		cs.byKey = map[string]change{}
	}
	if old, ok := cs.byKey[key]; ok {
		cs.size -= len(key) + old.n
	}
	cs.byKey[key] = ch
	cs.size += len(key) + ch.n
	return nil
}

// value reads ch's value into buf (grown as needed).
func (cs *changes) value(ch change, buf []byte) ([]byte, error) {
	if ch.n == 0 {
		return buf[:0], nil
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
// cleaning. It is read back only by the write that merges it.
type journal struct {
	f       *os.File
	w       *bufio.Writer
	off     int64 // bytes appended
	flushed int64 // bytes in the file, the rest in w
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
	return &journal{f: f, w: bufio.NewWriterSize(f, journalBuffer)}, nil
}

func (j *journal) append(v []byte) (int64, error) {
	off := j.off
	if _, err := j.w.Write(v); err != nil {
		return 0, fmt.Errorf("listcache: writing the journal of changes: %w", err)
	}
	j.off += int64(len(v))
	if j.w.Buffered() == 0 {
		j.flushed = j.off
	}
	return off, nil
}

func (j *journal) read(off int64, n int, buf []byte) ([]byte, error) {
	if off+int64(n) > j.flushed {
		if err := j.w.Flush(); err != nil {
			return nil, fmt.Errorf("listcache: writing the journal of changes: %w", err)
		}
		j.flushed = j.off
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := j.f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("listcache: reading the journal of changes at %d (%d bytes): %w", off, n, err)
	}
	return buf, nil
}
