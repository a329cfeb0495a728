package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/routed-net/routed/internal/procmem"
)

// procMem is a process's resident memory as the issue asks for it, in
// bytes: anonymous pages (heap, stacks, runtime: what the process itself
// costs) and file-backed ones (the executable's pages: page cache the
// kernel can reclaim, shared by every routed of the machine) apart, and
// the private pages (smaps_rollup's Private_*: resident pages no other
// process maps).
type procMem struct {
	Anon, File, Private int64
	// HWM: the process's largest resident memory (anonymous and
	// file-backed) since its start, kept by the kernel (VmHWM).
	HWM int64
}

func readMem(pid int) (procMem, error) {
	st, err := procmem.ReadStatus(pid)
	if err != nil {
		return procMem{}, err
	}
	m := procMem{Anon: st.Anon, File: st.File, HWM: st.HWM}
	if r, err := procmem.ReadRollup(pid); err == nil {
		m.Private = r.Private()
	}
	return m, nil
}

// cpuTicks is utime + stime of pid in USER_HZ (100 a second).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(rest) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short line", pid)
	}
	u, _ := strconv.ParseInt(rest[11], 10, 64)
	k, _ := strconv.ParseInt(rest[12], 10, 64)
	return u + k, nil
}

func mib(b int64) float64 { return procmem.MiB(b) }
