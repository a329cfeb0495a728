// Package procmem reads a process's memory split by what backs it, the
// way the kernel charges it.
//
// One RSS figure mixes two kinds of page that cost differently.
// Anonymous pages (heap, stacks, the Go runtime's own) belong to the
// process alone: only the process freeing them gives them back.
// File-backed pages (the executable's code and data, mapped from the
// file) are page cache: shared by every process mapping the same file,
// reclaimable under pressure, and charged to the cgroup that first read
// them whether or not they are mapped. Dropping a mapping's page-table
// entries lowers RSS and frees nothing. So a node's memory is reported
// as the two apart, and where the process runs in a memory cgroup, as
// the cgroup's working set (what kubelet and cadvisor report: usage
// less the inactive page cache).
package procmem

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Status is a process's resident memory from /proc/PID/status, in bytes.
type Status struct {
	// RSS is VmRSS: Anon + File + Shmem.
	RSS int64
	// Anon is RssAnon: heap, stacks and the runtime's memory.
	Anon int64
	// File is RssFile: resident pages of mapped files, the executable's
	// above all (page cache, shared with every process mapping it).
	File int64
	// Shmem is RssShmem: shared memory and tmpfs mappings.
	Shmem int64
	// Swap is VmSwap: anonymous pages swapped out.
	Swap int64
	// HWM is VmHWM: the largest RSS since the process started (the
	// kernel keeps it, so a peak between two samples is not missed;
	// anonymous and file-backed are not told apart there).
	HWM int64
	// Threads is the number of OS threads (each keeps its stacks).
	Threads int
}

// ReadStatus reads pid's /proc/PID/status.
func ReadStatus(pid int) (Status, error) {
	var s Status
	err := readFields(fmt.Sprintf("/proc/%d/status", pid), func(key string, v int64) {
		switch key {
		case "VmRSS":
			s.RSS = v * 1024
		case "VmHWM":
			s.HWM = v * 1024
		case "RssAnon":
			s.Anon = v * 1024
		case "RssFile":
			s.File = v * 1024
		case "RssShmem":
			s.Shmem = v * 1024
		case "VmSwap":
			s.Swap = v * 1024
		case "Threads":
			s.Threads = int(v)
		}
	})
	return s, err
}

// String is "anon 12.3 MiB, file 20.1 MiB".
func (s Status) String() string {
	return fmt.Sprintf("anon %.1f MiB, file %.1f MiB", MiB(s.Anon), MiB(s.File))
}

// Rollup is /proc/PID/smaps_rollup, in bytes: the process's mappings
// summed, with each shared page divided among the processes mapping it
// (the Pss figures) and pages split by whether another process maps
// them too (Shared) or not (Private).
type Rollup struct {
	RSS, PSS                   int64
	PSSAnon, PSSFile, PSSShmem int64
	SharedClean, SharedDirty   int64
	PrivateClean, PrivateDirty int64
	Anonymous, Swap            int64
}

// Private is the resident memory no other process maps: what ending the
// process would give back (its anonymous pages, mostly).
func (r Rollup) Private() int64 { return r.PrivateClean + r.PrivateDirty }

// Shared is the resident memory other processes map too (the
// executable's pages when several routed run from one file).
func (r Rollup) Shared() int64 { return r.SharedClean + r.SharedDirty }

// ReadRollup reads pid's /proc/PID/smaps_rollup.
func ReadRollup(pid int) (Rollup, error) {
	var r Rollup
	fields := map[string]*int64{
		"Rss": &r.RSS, "Pss": &r.PSS, "Pss_Anon": &r.PSSAnon, "Pss_File": &r.PSSFile, "Pss_Shmem": &r.PSSShmem,
		"Shared_Clean": &r.SharedClean, "Shared_Dirty": &r.SharedDirty,
		"Private_Clean": &r.PrivateClean, "Private_Dirty": &r.PrivateDirty,
		"Anonymous": &r.Anonymous, "Swap": &r.Swap,
	}
	err := readFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid), func(key string, v int64) {
		if p := fields[key]; p != nil {
			*p = v * 1024
		}
	})
	return r, err
}

// MiB is b in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// readFields calls set with every "Key: value ..." line of path whose
// first word after the colon is a number (the unit, kB, is dropped).
func readFields(path string, set func(key string, v int64)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("procmem: %w", err)
	}
	defer f.Close()
	if err := parseFields(f, set); err != nil {
		return fmt.Errorf("procmem: %s: %w", path, err)
	}
	return nil
}

func parseFields(r io.Reader, set func(key string, v int64)) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			set(key, v)
		}
	}
	return sc.Err()
}
