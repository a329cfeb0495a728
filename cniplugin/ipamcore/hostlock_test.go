package ipamcore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHostLockExcludes: a second holder waits until the first releases,
// and gives up with ErrLock (CNI code 11) after its wait.
func TestHostLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "ipam.lock")
	first, err := hostLock{path: path, wait: time.Second}.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file %s: %v, mode %v; want 0600", path, err, fi.Mode())
	}
	_, err = hostLock{path: path, wait: 100 * time.Millisecond}.acquire(context.Background())
	if !errors.Is(err, ErrLock) || CodeOf(err) != 11 {
		t.Fatalf("second acquire while held: %v (code %d), want ErrLock with code 11", err, CodeOf(err))
	}
	got := make(chan error, 1)
	go func() {
		release, err := hostLock{path: path, wait: 10 * time.Second}.acquire(context.Background())
		if err == nil {
			release()
		}
		got <- err
	}()
	first()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("acquire after release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never got the lock after it was released")
	}
}

// TestHostLockRefusesSymlink: the lock file is never reached through a
// symlink (someone could point it at a file they want truncated or
// locked).
func TestHostLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "ipam.lock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := (hostLock{path: link, wait: time.Second}).acquire(context.Background()); !errors.Is(err, ErrLock) {
		t.Fatalf("acquire through a symlink: %v, want ErrLock", err)
	}
}

// TestLockFileConf: the lock path comes from the netconf's top level and
// must be absolute.
func TestLockFileConf(t *testing.T) {
	c, err := ParseConf([]byte(`{"ipam":{"type":"routed-ipam"}}`))
	if err != nil || c.LockFile != DefaultLockFile {
		t.Fatalf("default: %v, %q", err, c.LockFile)
	}
	c, err = ParseConf([]byte(`{"ipam_lock_file":"/run/x/ipam.lock","ipam":{"type":"routed-ipam"}}`))
	if err != nil || c.LockFile != "/run/x/ipam.lock" {
		t.Fatalf("set: %v, %q", err, c.LockFile)
	}
	if _, err := ParseConf([]byte(`{"ipam_lock_file":"rel/ipam.lock","ipam":{}}`)); !errors.Is(err, ErrConfig) {
		t.Fatalf("relative path: %v, want ErrConfig", err)
	}
}

// TestLockFileID: routed's lock check accepts the plugin's lock file and
// refuses another one (ErrLockMismatch, so the plugin locks it itself).
func TestLockFileID(t *testing.T) {
	dir := t.TempDir()
	mine, other := filepath.Join(dir, "ipam.lock"), filepath.Join(dir, "other", "ipam.lock")
	dev, ino, err := LockFileID(mine)
	if err != nil {
		t.Fatal(err)
	}
	check := CheckLockFileID(dev, ino)
	for _, tc := range []struct {
		path string
		want error
	}{{mine, nil}, {other, ErrLockMismatch}} {
		release, err := hostLock{path: tc.path, wait: time.Second, check: check}.acquire(context.Background())
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Fatalf("lock %s: %v, want %v", tc.path, err, tc.want)
		}
		if release != nil {
			release()
		}
	}
	// A refused lock is released: the plugin can take it at once.
	release, err := hostLock{path: other, wait: time.Second}.acquire(context.Background())
	if err != nil {
		t.Fatalf("lock after a refused check: %v", err)
	}
	release()
}
