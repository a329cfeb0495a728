package ipamload

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
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

// refHostLocal is the reference host-local plugin that tests/ensure-deps.sh
// installs in $GOPATH/bin.
func refHostLocal(b *testing.B) string {
	b.Helper()
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		b.Fatalf("go env GOPATH: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "bin", "host-local")
	if _, err := os.Stat(p); err != nil {
		b.Fatalf("%s missing: run `make deps` (tests/ensure-deps.sh)", p)
	}
	return p
}

// columns are the benchmark's columns, in the order they run each
// iteration; PARALLELADD_COLUMNS (comma-separated) picks some of them.
// "prev" (not by default) is "routed" with the routed-ipam found in
// PARALLELADD_PREV_BIN, another build's, to compare two builds in one
// run.
func columns(b *testing.B) []string {
	all := []string{"old", "new", "routed", "ref", "prev"}
	env := os.Getenv("PARALLELADD_COLUMNS")
	if env == "" {
		return all[:4]
	}
	var cols []string
	for _, c := range strings.Split(env, ",") {
		if !slices.Contains(all, c) {
			b.Fatalf("PARALLELADD_COLUMNS: unknown column %q (have %v)", c, all)
		}
		cols = append(cols, c)
	}
	return cols
}

// BenchmarkParallelADD runs 4 nodes x 16 and x 32 parallel exec'd ADDs
// (then DELs) with this tree's routed-ipam working against etcd itself
// ("new"), the same binary asking routed's CNI socket on each node
// ("routed"), the baseline's ("old"), all on one etcd with fsync on, and
// the reference host-local IPAM plugin on each node's own /24 ("ref"),
// and reports the rates, their ratios, the CPU per ADD of the plugin
// processes and of this process (routed's CNI service, etcd, the
// harness), and what failed or leaked.
//
// PARALLELADD_CPUPROFILE=file writes a CPU profile of this process
// during the routed column's ADDs (routed's CNI service and etcd run
// here); PARALLELADD_COLUMNS picks columns.
func BenchmarkParallelADD(b *testing.B) {
	nodes := []string{"bench-a", "bench-b", "bench-c", "bench-d"}
	c := NewCluster(b, "10.211.0.0/16", 26, nodes)
	cols := columns(b)
	newBin := testbin.Path(b, "routed-ipam")
	plugins := map[string]string{"new": newBin, "routed": newBin}
	if slices.Contains(cols, "old") {
		plugins["old"] = buildBaseline(b)
	}
	if slices.Contains(cols, "ref") {
		plugins["ref"] = refHostLocal(b)
	}
	if slices.Contains(cols, "prev") {
		dir := os.Getenv("PARALLELADD_PREV_BIN")
		if dir == "" {
			b.Fatal("column prev needs PARALLELADD_PREV_BIN: the directory of the other build's routed-ipam and routed-ipam-full")
		}
		plugins["prev"] = filepath.Join(dir, "routed-ipam")
	}
	socks := c.StartRouted(b, nodes)
	for _, par := range []int{16, 32} {
		b.Run(fmt.Sprintf("4x%d", par), func(b *testing.B) {
			rate := map[string]float64{}
			for i := 0; i < b.N; i++ {
				for _, which := range cols {
					run := Run{
						Plugin: plugins[which], Nodes: nodes, Parallel: par, Rounds: 512 / (4 * par),
						Network: fmt.Sprintf("%s%d-%d", which, par, i), LockDir: b.TempDir(),
						LogFile: filepath.Join(b.TempDir(), "cni.log"),
					}
					switch which {
					case "routed", "prev":
						run.Sockets = socks
					case "ref":
						run.HostLocal, run.HostLocalNet = b.TempDir(), [2]byte{10, 212}
					}
					stop := profile(b, which, par)
					res := Execute(b, c, run)
					stop()
					rate[which] = res.AddsPerSecond()
					b.ReportMetric(res.AddsPerSecond(), which+"-adds/s")
					b.ReportMetric(float64(res.AddFailures), which+"-add-failures")
					b.ReportMetric(float64(res.DelFailures), which+"-del-failures")
					b.ReportMetric(float64(res.Left), which+"-leaked")
					b.ReportMetric(float64(res.PerAdd(res.PluginCPU))/1e6, which+"-plugin-cpu-ms/add")
					b.ReportMetric(float64(res.PerAdd(res.SelfCPU))/1e6, which+"-inproc-cpu-ms/add")
					if run.Sockets != nil {
						b.ReportMetric(res.RequestsPerAdd(), which+"-etcd-req/add")
					}
					if len(res.Errors) > 0 {
						b.Logf("%s 4x%d: %v", which, par, res.Errors)
					}
				}
			}
			ratio := func(a, c string) {
				if rate[a] > 0 && rate[c] > 0 {
					b.ReportMetric(rate[a]/rate[c], a+"/"+c+"-adds/s")
				}
			}
			ratio("new", "old")
			ratio("routed", "new")
			ratio("routed", "ref")
			ratio("prev", "ref")
			ratio("routed", "prev")
		})
	}
}

// profile starts the CPU profile of PARALLELADD_CPUPROFILE for the
// routed column (the file gets the parallelism appended) and returns
// what stops it.
func profile(b *testing.B, which string, par int) func() {
	path := os.Getenv("PARALLELADD_CPUPROFILE")
	if path == "" || which != "routed" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s.4x%d", path, par))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
