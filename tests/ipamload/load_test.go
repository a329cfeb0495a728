package ipamload

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/routed-net/routed/tests/testbin"
)

// TestParallelPodStarts execs the real routed-ipam on 4 nodes with 16 and
// then 32 ADDs at a time on each, as a kubelet starting a burst of pods
// does, then DELs them all: no call may fail and nothing may stay
// allocated. Before the host lock and the time-budgeted retries, 4 x 16
// failed 8-9 % of ADDs with "too much contention" and left addresses
// behind.
func TestParallelPodStarts(t *testing.T) {
	nodes := []string{"load-a", "load-b", "load-c", "load-d"}
	c := NewCluster(t, "10.210.0.0/16", 26, nodes)
	plugin := testbin.Path(t, "routed-ipam")
	socks := c.StartRouted(t, nodes)
	for _, tc := range []struct {
		parallel, rounds int
		routed           bool
	}{{16, 4, false}, {32, 2, false}, {32, 2, true}} {
		name := fmt.Sprintf("4x%d", tc.parallel)
		run := Run{
			Plugin: plugin, Nodes: nodes, Parallel: tc.parallel, Rounds: tc.rounds,
			Network: "par-" + name, LockDir: t.TempDir(),
			LogFile: filepath.Join(t.TempDir(), "cni.log"),
		}
		if tc.routed {
			// Through routed's CNI socket (one per node).
			name += "-routed"
			run.Network, run.Sockets = "par-"+name, socks
		}
		t.Run(name, func(t *testing.T) {
			res := Execute(t, c, run)
			t.Logf("4 nodes x %d parallel (%s): %d ADDs in %s (%.0f ADDs/s), %d ADD and %d DEL failures, %d addresses left, %.2f etcd requests per ADD by routed",
				tc.parallel, name, res.Adds, res.AddTime.Round(1e6), res.AddsPerSecond(), res.AddFailures, res.DelFailures, res.Left, res.RequestsPerAdd())
			if res.AddFailures != 0 || res.DelFailures != 0 {
				t.Errorf("%d ADDs and %d DELs of %d failed: %v", res.AddFailures, res.DelFailures, res.Adds, res.Errors)
			}
			if res.Left != 0 {
				t.Errorf("%d addresses still allocated after every DEL", res.Left)
			}
		})
	}
}
