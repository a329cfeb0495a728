package procmem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStatusOfSelf: the test process's anonymous memory grows by what it
// allocates and touches, its file-backed memory (the test binary's pages)
// is there, and the parts add up to VmRSS.
func TestStatusOfSelf(t *testing.T) {
	before, err := ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A mapping of its own, not Go's heap: a heap the runtime already
	// faulted in (an earlier run of the test) would not grow.
	const size = 64 << 20
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	after, err := ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %v (%d threads); after touching 64 MiB: %v", before, before.Threads, after)
	if grew := after.Anon - before.Anon; grew < size*3/4 {
		t.Errorf("anonymous memory grew by %.1f MiB after touching 64 MiB", MiB(grew))
	}
	if after.File == 0 || after.Threads == 0 {
		t.Errorf("no file-backed memory or no threads: %+v", after)
	}
	if sum := after.Anon + after.File + after.Shmem; sum != after.RSS {
		t.Errorf("RssAnon+RssFile+RssShmem = %d, VmRSS %d", sum, after.RSS)
	}
}

// TestRollupOfSelf: private and shared pages add up to Rss, and the
// proportional set is no larger than it.
func TestRollupOfSelf(t *testing.T) {
	r, err := ReadRollup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rss %.1f MiB = private %.1f + shared %.1f; pss %.1f (anon %.1f, file %.1f)",
		MiB(r.RSS), MiB(r.Private()), MiB(r.Shared()), MiB(r.PSS), MiB(r.PSSAnon), MiB(r.PSSFile))
	if r.RSS == 0 || r.Private()+r.Shared() != r.RSS || r.PSS > r.RSS || r.PSSAnon == 0 || r.PSSFile == 0 {
		t.Errorf("inconsistent smaps_rollup: %+v", r)
	}
}

// TestCgroupOfSelf reads the test's own memory cgroup where it runs in
// one.
func TestCgroupOfSelf(t *testing.T) {
	c, err := ReadCgroup(os.Getpid())
	if errors.Is(err, ErrNoMemoryCgroup) {
		// Not a skip: the answer must be true of this process.
		b, rerr := os.ReadFile("/proc/self/cgroup")
		if rerr != nil {
			t.Fatal(rerr)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || parts[2] == "/" {
				continue
			}
			v1 := strings.Contains(","+parts[1]+",", ",memory,")
			_, statErr := os.Stat(filepath.Join("/sys/fs/cgroup", parts[2], "memory.current"))
			if v1 || (parts[0] == "0" && statErr == nil) {
				t.Fatalf("ReadCgroup found no memory cgroup, but /proc/self/cgroup lists %q", line)
			}
		}
		t.Logf("no memory cgroup, as /proc/self/cgroup says:\n%s", b)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (v2 %v): usage %.1f MiB, %v", c.Dir, c.V2, MiB(c.Usage), c)
	if c.Usage == 0 || c.WorkingSet() == 0 || c.WorkingSet() > c.Usage || c.Anon == 0 {
		t.Errorf("inconsistent cgroup memory: %+v", c)
	}
}

func TestCgroupDir(t *testing.T) {
	v2 := t.TempDir()
	if err := os.MkdirAll(filepath.Join(v2, "pods", "p1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v2, "pods", "p1", "memory.current"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v1Mounts := "35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"36 30 0:32 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	for _, c := range []struct {
		name, member, mounts, dir string
		v2                        bool
		err                       error
	}{
		{"v1 memory controller (hybrid host)", "4:memory:/lab/n1\n0::/\n", v1Mounts, "/sys/fs/cgroup/memory/lab/n1", false, nil},
		{"v1 inside a container (mount root is the cgroup)", "4:memory:/kubepods/p1\n",
			"35 30 0:31 /kubepods/p1 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n", "/sys/fs/cgroup/memory", false, nil},
		{"unified hierarchy", "0::/pods/p1\n", "30 1 0:26 / " + v2 + " rw - cgroup2 cgroup2 rw\n", filepath.Join(v2, "pods", "p1"), true, nil},
		{"unified, root cgroup", "0::/\n", "30 1 0:26 / " + v2 + " rw - cgroup2 cgroup2 rw\n", "", false, ErrNoMemoryCgroup},
		{"no memory controller", "3:cpu:/x\n", "35 30 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "", false, ErrNoMemoryCgroup},
	} {
		dir, isV2, err := cgroupDir(c.member, c.mounts)
		if dir != c.dir || isV2 != c.v2 || !errors.Is(err, c.err) {
			t.Errorf("%s: got %q v2=%v err=%v, want %q v2=%v err=%v", c.name, dir, isV2, err, c.dir, c.v2, c.err)
		}
	}
}

func TestParseStat(t *testing.T) {
	s := parseStat("cache 100\nrss 7\ntotal_rss 20\ntotal_cache 300\ntotal_inactive_file 50\nbogus\n")
	c := Cgroup{Usage: 400, Anon: s["total_rss"], File: s["total_cache"], InactiveFile: s["total_inactive_file"]}
	if c.Anon != 20 || c.File != 300 || c.WorkingSet() != 350 {
		t.Errorf("parsed %v into %+v (working set %d)", s, c, c.WorkingSet())
	}
	if (Cgroup{Usage: 10, InactiveFile: 20}).WorkingSet() != 0 {
		t.Error("working set below zero")
	}
}
