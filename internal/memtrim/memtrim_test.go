package memtrim

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// exeRSS sums the resident kB of the test binary's read-only mappings
// from /proc/self/smaps.
func exeRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kb, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if _, _, ok := strings.Cut(strings.Fields(line)[0], "-"); ok && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			_, _, in = readOnlyMappingOf(line, exe)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			v, _ := strconv.Atoi(strings.Fields(line)[1])
			kb += v
		}
	}
	return kb
}

// TestTrim: the executable's read-only mappings shrink to what is used
// afterwards, and the process keeps running code from them.
func TestTrim(t *testing.T) {
	before := exeRSS(t)
	n, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	after := exeRSS(t)
	t.Logf("advised %d KiB of mappings; resident %d -> %d KiB", n/1024, before, after)
	if n == 0 || after >= before {
		t.Fatalf("advised %d bytes; resident %d -> %d KiB, want fewer", n, before, after)
	}
	// Code and data of the binary are read back on use.
	if _, _, ok := readOnlyMappingOf("00400000-00500000 r-xp 00000000 08:01 1 /bin/x", "/bin/x"); !ok {
		t.Fatal("a read-only mapping line did not parse")
	}
	if _, _, ok := readOnlyMappingOf("00400000-00500000 rw-p 00000000 08:01 1 /bin/x", "/bin/x"); ok {
		t.Fatal("a writable mapping was taken")
	}
}

// TestAfterReady: nothing is trimmed before ready reports true; once it
// does, the trim runs after the settle time; a context that ends first
// ends the wait.
func TestAfterReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := AfterReady(ctx, func(context.Context) bool { return false }, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while not ready: %v", err)
	}
	asked := 0
	ready := func(context.Context) bool { asked++; return asked >= 2 }
	n, err := AfterReady(context.Background(), ready, 10*time.Millisecond)
	if err != nil || n == 0 || asked != 2 {
		t.Fatalf("advised %d bytes, err %v, readiness asked %d times (want 2)", n, err, asked)
	}
}
