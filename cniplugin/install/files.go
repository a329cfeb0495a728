package install

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/routed-net/routed/internal/atomicfile"
)

// ErrUnsafeDir is returned when a directory that will hold keys is a
// symlink or not a directory.
var ErrUnsafeDir = errors.New("install: unsafe directory for secrets")

// privateDir makes dir a real directory of mode 0700 owned by whoever
// runs install: created if missing, its mode enforced if it exists (a
// looser mode left by hand is tightened), and refused if it is a symlink
// (the keys would land wherever it points) or not a directory.
func privateDir(dir string) error {
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink; remove it and run install again", ErrUnsafeDir, dir)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory; remove it and run install again", ErrUnsafeDir, dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("set mode 0700 on %s: %w", dir, err)
	}
	return nil
}

// copyAtomic copies src to dst atomically (atomicfile): readers (the
// runtime, a running plugin) never see a partial file.
func copyAtomic(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Replace(dst, mode, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
