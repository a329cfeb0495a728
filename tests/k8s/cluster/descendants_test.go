package cluster

import (
	"fmt"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// TestWithDescendants: a shell's children and grandchildren are found
// from the shell's PID (what Cleanup kills with a pod's shim).
func TestWithDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & (sleep 300 & wait) & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range withDescendants([]int{cmd.Process.Pid}) {
			if pid != cmd.Process.Pid {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// The shell starts a sleep and a subshell with one more: 4
	// processes in all, once it has forked them.
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() string {
		if got := withDescendants([]int{cmd.Process.Pid}); len(got) != 4 || got[0] != cmd.Process.Pid {
			return fmt.Sprintf("descendants of the shell %d: %v; want it and its 3 descendants", cmd.Process.Pid, got)
		}
		return ""
	})
	if got := withDescendants([]int{1}); len(got) != 0 {
		t.Errorf("init must never be listed: %v", got)
	}
	if got := pidsIn("12 1 x 34\n"); !slices.Equal(got, []int{12, 34}) {
		t.Errorf("pidsIn: %v", got)
	}
}
