package ipamload

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/routed-net/routed/tests/testbin"
)

// baselineCommit is the last commit before the host IPAM lock and the
// time-budgeted retries: the "old behaviour" the benchmark compares with.
const baselineCommit = "5e761b4"

// buildBaseline builds routed-ipam as of baselineCommit from this
// repository's history.
func buildBaseline(b *testing.B) string {
	b.Helper()
	src, out := b.TempDir(), b.TempDir()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.Fatalf("git rev-parse: %v (the baseline is built from this repository's history)", err)
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", string(root[:len(root)-1]), baselineCommit, src))
	if o, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("extract %s: %v\n%s (a shallow clone lacks it: git fetch --unshallow)", baselineCommit, err, o)
	}
	bin := filepath.Join(out, "routed-ipam")
	build := exec.Command("go", "build", "-o", bin, "./cniplugin/cmd/routed-ipam")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0")
	if o, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build baseline: %v\n%s", err, o)
	}
	return bin
}

// BenchmarkParallelADD runs 4 nodes x 16 and x 32 parallel exec'd ADDs
// (then DELs) with this tree's routed-ipam working against etcd itself
// ("new"), the same binary asking routed's CNI socket on each node
// ("routed"), and the baseline's ("old"), on one etcd with fsync on, and
// reports the rates, their ratios, and what failed or leaked.
func BenchmarkParallelADD(b *testing.B) {
	nodes := []string{"bench-a", "bench-b", "bench-c", "bench-d"}
	c := NewCluster(b, "10.211.0.0/16", 26, nodes)
	newBin := testbin.Path(b, "routed-ipam")
	plugins := map[string]string{"new": newBin, "old": buildBaseline(b), "routed": newBin}
	socks := c.StartRouted(b, nodes)
	for _, par := range []int{16, 32} {
		b.Run(fmt.Sprintf("4x%d", par), func(b *testing.B) {
			rate := map[string]float64{}
			for i := 0; i < b.N; i++ {
				for _, which := range []string{"old", "new", "routed"} {
					run := Run{
						Plugin: plugins[which], Nodes: nodes, Parallel: par, Rounds: 512 / (4 * par),
						Network: fmt.Sprintf("%s%d-%d", which, par, i), LockDir: b.TempDir(),
						LogFile: filepath.Join(b.TempDir(), "cni.log"),
					}
					if which == "routed" {
						run.Sockets = socks
					}
					res := Execute(b, c, run)
					rate[which] = res.AddsPerSecond()
					b.ReportMetric(res.AddsPerSecond(), which+"-adds/s")
					b.ReportMetric(float64(res.AddFailures), which+"-add-failures")
					b.ReportMetric(float64(res.DelFailures), which+"-del-failures")
					b.ReportMetric(float64(res.Left), which+"-leaked")
					if which == "routed" {
						b.ReportMetric(res.RequestsPerAdd(), "routed-etcd-req/add")
					}
				}
			}
			b.ReportMetric(rate["new"]/rate["old"], "new/old-adds/s")
			b.ReportMetric(rate["routed"]/rate["new"], "routed/new-adds/s")
		})
	}
}
