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
}

// acquire blocks until the lock is held or the wait is over, and returns
// the function that releases it.
func (l hostLock) acquire(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return nil, fmt.Errorf("%w: create directory of %s: %v", ErrLock, l.path, err)
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrLock, l.path, err)
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
			return nil, fmt.Errorf("%w: flock %s: %v", ErrLock, l.path, err)
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
