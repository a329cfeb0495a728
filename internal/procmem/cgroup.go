package procmem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoMemoryCgroup is returned by ReadCgroup when the process is in no
// memory cgroup it can read (the root cgroup, or no memory controller
// mounted).
var ErrNoMemoryCgroup = errors.New("procmem: no memory cgroup")

// Cgroup is the memory charged to the cgroup a process runs in, in bytes.
type Cgroup struct {
	// Dir is the cgroup's directory (under /sys/fs/cgroup).
	Dir string
	// V2 is true on the unified hierarchy, false on v1's memory
	// controller.
	V2 bool
	// Usage is every page charged to the cgroup, page cache included:
	// memory.current (v2), memory.usage_in_bytes (v1).
	Usage int64
	// Anon and File split Usage's pages: memory.stat's anon and file
	// (v2), total_rss and total_cache (v1).
	Anon, File int64
	// InactiveFile is the page cache the kernel reclaims first:
	// memory.stat's inactive_file (v2), total_inactive_file (v1).
	InactiveFile int64
}

// WorkingSet is Usage less the inactive page cache, as kubelet and
// cadvisor compute container_memory_working_set_bytes (what evictions
// and the Kubernetes metrics API go by).
func (c Cgroup) WorkingSet() int64 {
	return max(0, c.Usage-c.InactiveFile)
}

// String is "working set 40.2 MiB (anon 12.3, file 30.1, inactive file 2.2)".
func (c Cgroup) String() string {
	return fmt.Sprintf("working set %.1f MiB (anon %.1f, file %.1f, inactive file %.1f)",
		MiB(c.WorkingSet()), MiB(c.Anon), MiB(c.File), MiB(c.InactiveFile))
}

// ReadCgroup reads the memory of pid's cgroup: v1's memory controller
// where it is mounted, else the unified hierarchy's.
func ReadCgroup(pid int) (Cgroup, error) {
	member, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return Cgroup{}, fmt.Errorf("procmem: %w", err)
	}
	// Paths in /proc/PID/cgroup and in our own mountinfo are both
	// relative to the reader's cgroup namespace.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return Cgroup{}, fmt.Errorf("procmem: %w", err)
	}
	c := Cgroup{}
	c.Dir, c.V2, err = cgroupDir(string(member), string(mounts))
	if err != nil {
		return c, err
	}
	usageFile, anon, file, inactive := "memory.usage_in_bytes", "total_rss", "total_cache", "total_inactive_file"
	if c.V2 {
		usageFile, anon, file, inactive = "memory.current", "anon", "file", "inactive_file"
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, usageFile))
	if err != nil {
		return c, fmt.Errorf("procmem: %w", err)
	}
	if c.Usage, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return c, fmt.Errorf("procmem: %s: %w", usageFile, err)
	}
	b, err = os.ReadFile(filepath.Join(c.Dir, "memory.stat"))
	if err != nil {
		return c, fmt.Errorf("procmem: %w", err)
	}
	stat := parseStat(string(b))
	c.Anon, c.File, c.InactiveFile = stat[anon], stat[file], stat[inactive]
	return c, nil
}

// cgroupDir finds the directory of the memory cgroup named in member
// (the text of /proc/PID/cgroup) among mounts (of /proc/self/mountinfo).
func cgroupDir(member, mounts string) (dir string, v2 bool, err error) {
	var v1Path, v2Path string
	for _, line := range strings.Split(member, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2Path = f[2]
		case hasWord(f[1], "memory"):
			v1Path = f[2]
		}
	}
	for _, line := range strings.Split(mounts, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		root, point := f[3], f[4]
		switch {
		case g[0] == "cgroup" && hasWord(g[2], "memory") && v1Path != "":
			return under(point, root, v1Path), false, nil
		case g[0] == "cgroup2" && v2Path != "" && v1Path == "":
			d := under(point, root, v2Path)
			// The root cgroup, or a v2 mount without the memory
			// controller (a hybrid host's /sys/fs/cgroup/unified).
			if _, err := os.Stat(filepath.Join(d, "memory.current")); err == nil {
				return d, true, nil
			}
		}
	}
	return "", false, ErrNoMemoryCgroup
}

// under is the directory of cgroup path on a mount at point whose root
// is root.
func under(point, root, path string) string {
	if root != "/" {
		path = strings.TrimPrefix(path, root)
	}
	return filepath.Join(point, path)
}

func hasWord(list, w string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == w {
			return true
		}
	}
	return false
}

// parseStat reads memory.stat's "key value" lines.
func parseStat(s string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}
