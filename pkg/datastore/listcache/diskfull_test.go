package listcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
)

// inMountNSDir names, in a re-executed test binary, the directory to
// mount a small tmpfs on: the test runs in a mount namespace of its own.
const inMountNSDir = "LISTCACHE_TEST_TMPFS_DIR"

// inPrivateTmpfs runs the calling test again in a child process in a
// private mount namespace (gone with the process, so nothing can leak
// onto the host's mounts), where body gets a tmpfs of size bytes.
// In the parent it returns after the child passed; in the child it
// runs body.
func inPrivateTmpfs(t *testing.T, size int, body func(t *testing.T, dir string)) {
	t.Helper()
	if dir := os.Getenv(inMountNSDir); dir != "" {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
			t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
		}
		body(t, dir)
		return
	}
	testenv.RequireRoot(t, "a tmpfs in a mount namespace")
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inMountNSDir+"="+t.TempDir())
	// Unshareflags' CLONE_NEWNS also makes every mount private in the
	// child before it starts, so its tmpfs never shows on the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in a mount namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("the test in its mount namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatal("the test in its mount namespace did not pass")
	}
}

// fillDisk writes a file in dir until the file system has no space left.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v (want ENOSPC)", dir, err)
			}
			return path
		}
	}
}

// TestJournalFailuresCatchUp: a full disk (ENOSPC on the journal, then
// on the write) and a read-only remount (no journal can be created)
// keep the cache from being written while they last, never with a
// wrong value, and the first write once the file system works again
// has every change: the cache file reaches the latest revision.
func TestJournalFailuresCatchUp(t *testing.T) {
	inPrivateTmpfs(t, 1<<20, func(t *testing.T, dir string) {
		path := filepath.Join(dir, "cache")
		c, _ := New(Options{Path: path, WriteRate: -1})
		c.Load(prefix, parts, probeKey)
		list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2), kv(epPart+"p00", "old", 3), kv(epPart+"gone", "x", 4)}, 10, 1)
		if err := c.save(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"clusterinformation/default": "ci", "workloadendpoints/p00": "old", "workloadendpoints/gone": "x"}
		checkFileAt(t, path, 10, want)

		// The disk fills: 30 values of 2 KiB (more than the journal's
		// buffer) cannot reach the journal.
		filler := fillDisk(t, dir)
		valueOf := func(i, rev int) string { return fmt.Sprintf("%02d@%d:", i, rev) + strings.Repeat("v", 2<<10) }
		rev := 10
		for i := range 30 {
			rev++
			k := fmt.Sprintf("p%02d", i)
			c.Changed([]*clientv3.Event{putEv(epPart+k, valueOf(i, rev), int64(rev))}, int64(rev))
			want["workloadendpoints/"+k] = valueOf(i, rev)
		}
		rev++
		c.Changed([]*clientv3.Event{delEv(epPart+"gone", int64(rev))}, int64(rev))
		delete(want, "workloadendpoints/gone")
		if err := c.save(context.Background(), true); err == nil {
			t.Fatal("a write on a full disk succeeded")
		}
		checkFileAt(t, path, 10, map[string]string{"clusterinformation/default": "ci", "workloadendpoints/p00": "old", "workloadendpoints/gone": "x"})
		// More changes while the disk is full (the write's own changes
		// went back to a new journal, on the same full disk).
		for i := range 9 {
			rev++
			k := fmt.Sprintf("p%02d", i*3)
			c.Changed([]*clientv3.Event{putEv(epPart+k, valueOf(i*3, rev), int64(rev))}, int64(rev))
			want["workloadendpoints/"+k] = valueOf(i*3, rev)
		}
		if rev != 50 {
			t.Fatalf("the test's changes end at %d, want 50", rev)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if err := c.save(context.Background(), true); err != nil {
			t.Fatalf("the write once space was freed: %v", err)
		}
		checkFileAt(t, path, 50, want)

		// A read-only remount: no journal can even be created.
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			t.Fatalf("remounting %s read-only: %v", dir, err)
		}
		for i := range 20 {
			rev++
			k := fmt.Sprintf("p%02d", i)
			c.Changed([]*clientv3.Event{putEv(epPart+k, valueOf(i, rev), int64(rev))}, int64(rev))
			want["workloadendpoints/"+k] = valueOf(i, rev)
		}
		if err := c.save(context.Background(), true); err == nil {
			t.Fatal("a write on a read-only file system succeeded")
		}
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT, ""); err != nil {
			t.Fatalf("remounting %s read-write: %v", dir, err)
		}
		if err := c.save(context.Background(), true); err != nil {
			t.Fatalf("the write once the file system is writable again: %v", err)
		}
		checkFileAt(t, path, int64(rev), want)
	})
}

// checkFileAt loads the cache file with a new Cache and checks it is at
// rev with exactly want (keys without the prefix).
func checkFileAt(t *testing.T, path string, rev int64, want map[string]string) {
	t.Helper()
	c, _ := New(Options{Path: path})
	cl, ok := c.Load(prefix, parts, probeKey)
	if !ok {
		t.Fatalf("the cache file does not load (want it at revision %d)", rev)
	}
	kvs := loaded(t, cl)
	if cl.Revision != rev {
		t.Fatalf("the cache file is at revision %d, want %d", cl.Revision, rev)
	}
	got := map[string]string{}
	for _, kv := range kvs {
		got[strings.TrimPrefix(string(kv.Key), prefix)] = string(kv.Value)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("at revision %d: %s = %.12q..., want %.12q...", rev, k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("at revision %d: %d keys, want %d", rev, len(got), len(want))
	}
}
