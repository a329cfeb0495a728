package listcache

import (
	"fmt"
	"os"
	"path/filepath"
)

// listWrite is a list from etcd being written to a temporary file beside
// the cache as the stream reads it, page by page: the same atomic
// replacement atomicfile.Replace makes (a fresh 0600 file, synced, then
// renamed over the cache), split so that the pages are written as they
// come and the sync and rename happen on Run's goroutine.
type listWrite struct {
	tmp *os.File
	fw  *writer
	hdr header
}

// startList creates the temporary file for a list described by h and
// writes its header.
func startList(path string, h header) (*listWrite, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("listcache: %w", err)
	}
	lw := &listWrite{tmp: tmp, hdr: h}
	if err := tmp.Chmod(0o600); err != nil {
		lw.abort()
		return nil, fmt.Errorf("listcache: %w", err)
	}
	if lw.fw, err = newWriter(tmp, h); err != nil {
		lw.abort()
		return nil, err
	}
	return lw, nil
}

// abort removes the temporary file; nil-safe.
func (lw *listWrite) abort() {
	if lw == nil {
		return
	}
	lw.tmp.Close()
	_ = os.Remove(lw.tmp.Name())
}

// commit makes the written list durable and puts it in place at path; it
// returns the file's size. On error the temporary file is removed.
func (lw *listWrite) commit(path string) (int64, error) {
	ok := false
	defer func() {
		if !ok {
			lw.abort()
		}
	}()
	if err := lw.tmp.Sync(); err != nil {
		return 0, fmt.Errorf("listcache: %w", err)
	}
	st, err := lw.tmp.Stat()
	if err != nil {
		return 0, fmt.Errorf("listcache: %w", err)
	}
	if err := lw.tmp.Close(); err != nil {
		return 0, fmt.Errorf("listcache: %w", err)
	}
	if err := os.Rename(lw.tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("listcache: %w", err)
	}
	ok = true
	syncDir(filepath.Dir(path))
	return st.Size(), nil
}
