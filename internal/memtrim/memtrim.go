// Package memtrim keeps a long-running process's resident set to the
// pages of its executable it actually uses.
//
// A Go binary's code and read-only data (routed: about 35 MB) are mapped
// from the file. On a page fault the kernel maps not only the page asked
// for but the cached pages around it (fault-around, 64 KiB), so after
// start-up nearly the whole executable is resident in every routed
// process (33 of 35 MiB measured), although the daemon runs a small part
// of it. Trim drops those mappings' page-table entries with
// MADV_DONTNEED; pages are read back from the file (usually the page
// cache) as they are used, each fault still mapping its 64 KiB around
// (MADV_RANDOM, which Trim also sets, stops read-ahead from disk but not
// fault-around: measured on Linux 6.18). AfterReady trims again once
// start-up is over. Only read-only file mappings of the executable are
// touched: dropping them loses nothing, as their content is the file's.
package memtrim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Trim applies the advice to the executable's read-only mappings and
// returns how many bytes of mappings it advised.
func Trim() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	defer f.Close()
	total := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, ok := readOnlyMappingOf(sc.Text(), exe)
		if !ok {
			continue
		}
		for _, advice := range []int{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, end-start, uintptr(advice)); e != 0 {
				return total, fmt.Errorf("memtrim: madvise %x-%x: %w", start, end, e)
			}
		}
		total += int(end - start)
	}
	return total, sc.Err()
}

// AfterReady waits until ready reports true (asked every second), then
// for settle, and trims once more: Trim, and the heap freed since start
// returned to the OS (debug.FreeOSMemory). Start-up runs code and touches
// data that the steady state does not (the first datastore lists, the
// first full dataplane programming, BGP's initial exchange), and the
// kernel's fault-around maps 64 KiB of the executable per fault, so
// without this the pages start-up touched stay resident for good. It returns what Trim
// advised, or ctx's error if ctx ends first.
func AfterReady(ctx context.Context, ready func(context.Context) bool, settle time.Duration) (int, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for !ready(ctx) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(settle):
	}
	n, err := Trim()
	debug.FreeOSMemory()
	return n, err
}

// readOnlyMappingOf parses one line of /proc/self/maps and reports the
// range of a mapping of file path without write permission.
func readOnlyMappingOf(line, path string) (start, end uintptr, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 6 || strings.Join(fields[5:], " ") != path || strings.Contains(fields[1], "w") {
		return 0, 0, false
	}
	lo, hi, found := strings.Cut(fields[0], "-")
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}

// DefaultGCPercent is the daemon's GOGC unless the environment sets one.
// routed's live heap is small and long-lived (GoBGP's tables and the
// node feed's cache), so the heap Go lets grow before a collection is
// most of its anonymous memory: at Go's 100 a route reflector with 100
// clients holding 24 MB live (before third_party/gobgp's smaller
// Adj-RIB-In) kept a 46 MB heap goal. 50 trades some collections for
// that memory; the daemon allocates little once in sync.
const DefaultGCPercent = 50

// GCPercent sets DefaultGCPercent unless GOGC is set (then Go's runtime
// has already applied it).
func GCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
