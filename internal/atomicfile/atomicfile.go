// Package atomicfile replaces files on the host the safe way: the content
// goes to a fresh temporary file beside the target (O_CREATE|O_EXCL, so
// nothing planted there is followed or reused), is synced, and is renamed
// over the target. Readers (the container runtime, a running CNI plugin)
// see the old or the new file, never a partial one, and a symlink at the
// target is replaced, not written through.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data, with mode.
func Write(path string, data []byte, mode os.FileMode) error {
	return Replace(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Replace replaces path with what fill writes, with mode. The mode is
// set before any byte is written, so a secret is never readable by
// others, even briefly.
func Replace(path string, mode os.FileMode, fill func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return nil
}
