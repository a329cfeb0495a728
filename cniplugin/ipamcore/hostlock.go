package ipamcore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockFile is the host-wide IPAM lock, as Calico's
// /var/run/calico/ipam.lock.
const DefaultLockFile = "/var/run/routed/ipam.lock"

// DefaultLockWait bounds how long a verb waits for the host lock. Holders
// are bounded by OpTimeout, so a long wait means many pods starting at
// once, not a stuck holder; the runtime retries a failed ADD anyway.
const DefaultLockWait = 5 * time.Minute

// OpTimeout bounds one ADD or DEL once the host lock is held (Calico's
// calico-ipam uses 90 s). Waiting for the lock does not count against it.
const OpTimeout = 90 * time.Second

// ErrLock marks a host lock that could not be taken (CNI code 11: try
// again later).
var ErrLock = errors.New("routed-ipam: host IPAM lock")

// hostLock serialises IPAM on one host: every routed-cni and routed-ipam
// process of the node reads and writes the node's blocks under it, from
// the first read to the commit, so processes of one node never conflict
// with each other and only other nodes' writes can make them retry.
//
// It is an flock(2) on a file, released by the kernel when the process
// dies, so a killed plugin never leaves the host locked.
type hostLock struct {
	path string
	wait time.Duration
	// check, when set, vets the locked file before the lock is used.
	check func(*os.File) error
}

// ErrLockMismatch means routed's CNI service locked a file that is not
// the plugin's lock file (another path, or the same path in another
// mount): the plugin must not rely on the service then, and takes the
// lock itself.
var ErrLockMismatch = errors.New("routed-ipam: host IPAM lock is not the plugin's")

// LockFileID creates the lock file at path if it is missing (as a lock
// holder would) and returns its device and inode: what routed's CNI
// service compares with the file it locks, so that the plugin and the
// service provably serialise on one lock.
func LockFileID(path string) (dev, ino uint64, err error) {
	f, err := openLockFile(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return fileID(f)
}

// CheckLockFileID returns a lock check (NewShared) that refuses a lock
// file other than the one with device dev and inode ino.
func CheckLockFileID(dev, ino uint64) func(*os.File) error {
	return func(f *os.File) error {
		d, i, err := fileID(f)
		if err != nil {
			return err
		}
		if d != dev || i != ino {
			return fmt.Errorf("%w: %s is device %d inode %d here, the plugin's is device %d inode %d; mount the lock file's directory into routed at the same path",
				ErrLockMismatch, f.Name(), d, i, dev, ino)
		}
		return nil
	}
}

func fileID(f *os.File) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, fmt.Errorf("%w: stat %s: %w", ErrLock, f.Name(), err)
	}
	return uint64(st.Dev), st.Ino, nil
}

// openLockFile opens (creating) the lock file, never through a symlink.
func openLockFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("%w: create directory of %s: %w", ErrLock, path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrLock, path, err)
	}
	return f, nil
}

// acquire blocks until the lock is held or the wait is over, and returns
// the function that releases it.
func (l hostLock) acquire(ctx context.Context) (func(), error) {
	f, err := openLockFile(l.path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.wait)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		for {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if err != unix.EINTR {
				got <- err
				return
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("%w: flock %s: %w", ErrLock, l.path, err)
		}
		if l.check != nil {
			if err := l.check(f); err != nil {
				_ = f.Close()
				return nil, err
			}
		}
		return func() { _ = f.Close() }, nil
	case <-ctx.Done():
		// The goroutine may still get the lock; closing the file releases
		// it then (and the process is about to exit with this error).
		go func() {
			<-got
			_ = f.Close()
		}()
		return nil, fmt.Errorf("%w: %s still held by another IPAM call after %s; many pods may be starting at once on this node, retry", ErrLock, l.path, l.wait)
	}
}
