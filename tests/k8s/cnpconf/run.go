package cnpconf

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/routed-net/routed/internal/ociimage"
	"github.com/routed-net/routed/tests/k8s/cluster"
)

// AgnhostImage is the image upstream's manifests run (conformance/base).
const AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.45"

// Features are the optional features routed supports, passed as
// --supported-features (the standard ClusterNetworkPolicy tests always
// run). ClusterNetworkPolicyEgressNodePeers is not among them: routed
// refuses `nodes` peers (routed/controllers: a PolicyNotExact event and
// a stricter reading), so its tests skip themselves, with the suite's
// reason.
var Features = []string{"ClusterNetworkPolicy", "ClusterNetworkPolicyNamedPorts"}

// Skip is a test left out because this machine lacks what it needs.
type Skip struct {
	Test, Reason string
}

// noSCTPReason is why the SCTP tests are left out.
const noSCTPReason = "sends SCTP: this kernel has no SCTP (no /proc/net/sctp, no module to load), so no pod can open an SCTP socket"

// Skips are the tests left out when this kernel has no SCTP: those
// whose every poke is SCTP (TestSkipsAreTheSCTPOnlyTests reads them from
// upstream's source). The tests that mix SCTP pokes with TCP and UDP
// ones run without their SCTP pokes (NoSCTPEnv).
var Skips = []Skip{
	{"CNPAdminTierIngressSCTP", noSCTPReason + " (every one of its pokes is SCTP)"},
	{"CNPAdminTierEgressSCTP", noSCTPReason + " (every one of its pokes is SCTP)"},
	{"CNPBaselineTierIngressSCTP", noSCTPReason + " (every one of its pokes is SCTP)"},
	{"CNPBaselineTierEgressSCTP", noSCTPReason + " (every one of its pokes is SCTP)"},
}

func sctpLacking() bool {
	_, err := os.Stat("/proc/net/sctp")
	return err != nil
}

// Spec is one conformance test's outcome.
type Spec struct {
	Name     string
	Duration time.Duration
	// Message is a failure's log or a skip's reason.
	Message string
	// NotMade are the test's SCTP pokes that were not made (NoSCTPEnv),
	// one line each from PokeNotMade on: who, to where, expecting what.
	NotMade []string
}

// Result sorts the conformance tests (TestConformance's subtests).
type Result struct {
	Passed, Failed, Skipped []Spec
	// Setup is the suite's own failure (base manifests, pods not
	// Ready), if any.
	Setup string
	// Log is the test binary's output.
	Log string
}

// Summary is the line `cnp: P passed, F failed, S skipped`, saying
// after the passed and the failed how many of those tests ran without
// some SCTP pokes, and how many pokes that was: `cnp: P passed (Q of
// them without their N SCTP pokes), F failed, S skipped`.
func (r Result) Summary() string {
	s := fmt.Sprintf("cnp: %d passed%s, %d failed%s, %d skipped",
		len(r.Passed), notMadeNote(r.Passed), len(r.Failed), notMadeNote(r.Failed), len(r.Skipped))
	if r.Setup != "" {
		s += " (the suite's setup failed)"
	}
	return s
}

// notMadeNote is ` (Q of them without their N SCTP pokes)` for the
// tests of specs that left out SCTP pokes, "" when none did.
func notMadeNote(specs []Spec) string {
	tests, pokes := 0, 0
	for _, s := range specs {
		if len(s.NotMade) > 0 {
			tests++
			pokes += len(s.NotMade)
		}
	}
	if tests == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of them without their %d SCTP pokes)", tests, pokes)
}

// Config says what to run.
type Config struct {
	// Test is the binary from Build; Agnhost is kubeapiserver.BuildE2E's.
	Test, Agnhost string
	// Run is a go test -run regexp over the tests' names ("" is all).
	Run string
	// Dir receives the image tarball and the test binary's output.
	Dir     string
	Timeout time.Duration
	// Progress, when set, gets one line per finished test.
	Progress func(string, ...any)
}

// Run imports agnhost as AgnhostImage into every node and runs the
// conformance tests against c.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config) (Result, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Hour
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Result{}, err
	}
	if err := importAgnhost(ctx, c, cfg); err != nil {
		return Result{}, err
	}
	skipped := machineSkips()
	var skipNames []string
	for _, s := range skipped {
		skipNames = append(skipNames, regexp.QuoteMeta(s.Name))
	}
	args := []string{"tool", "test2json", "-t", cfg.Test,
		"-test.v=test2json", "-test.timeout", cfg.Timeout.String(), "-test.run", "TestConformance/" + cfg.Run,
		"--supported-features", strings.Join(Features, ","),
	}
	if len(skipNames) > 0 {
		args = append(args, "-test.skip", "/^("+strings.Join(skipNames, "|")+")$")
	}
	logPath := filepath.Join(cfg.Dir, "conformance.json")
	logFile, err := os.Create(logPath)
	if err != nil {
		return Result{}, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	if sctpLacking() {
		cmd.Env = append(cmd.Env, NoSCTPEnv+"=1")
	}
	cmd.Dir = cfg.Dir
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	done := make(chan Result)
	go func() { done <- readEvents(io.TeeReader(pr, logFile), cfg.Progress) }()
	runErr := cmd.Wait()
	pw.Close()
	res := <-done
	res.Skipped = append(res.Skipped, skipped...)
	res.Log = logPath
	if len(res.Passed)+len(res.Failed) == 0 && res.Setup == "" {
		return res, fmt.Errorf("cnpconf: no test ran (%v); the output is in %s", runErr, logPath)
	}
	return res, nil
}

// ReadLog reads the go test2json output of an earlier run
// (Config.Dir/conformance.json), also one cut short.
func ReadLog(path string) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	res := readEvents(f, nil)
	res.Skipped = append(res.Skipped, machineSkips()...)
	res.Log = path
	return res, nil
}

// machineSkips are the Skips this machine needs, as skipped tests.
func machineSkips() []Spec {
	if !sctpLacking() {
		return nil
	}
	var out []Spec
	for _, s := range Skips {
		out = append(out, Spec{Name: s.Test, Message: s.Reason})
	}
	return out
}

// event is one line of go test2json's output.
type event struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// readEvents sorts TestConformance's direct subtests by how they ended;
// a failure keeps the test's output (its failed pokes say which pod
// reached which, on what port).
func readEvents(r io.Reader, progress func(string, ...any)) Result {
	var res Result
	out := map[string]*strings.Builder{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		top, rest, _ := strings.Cut(ev.Test, "/")
		if top != "TestConformance" {
			continue
		}
		name, _, sub := strings.Cut(rest, "/")
		if ev.Action == "output" {
			if out[name] == nil {
				out[name] = &strings.Builder{}
			}
			out[name].WriteString(ev.Output)
			continue
		}
		if sub || (ev.Action != "pass" && ev.Action != "fail" && ev.Action != "skip") {
			continue
		}
		text := ""
		if out[name] != nil {
			text = out[name].String()
		}
		sp := Spec{Name: name, Duration: time.Duration(ev.Elapsed * float64(time.Second)), NotMade: notMade(text)}
		if name == "" {
			// TestConformance itself: a failure of its own is the
			// setup's (a subtest's failure also fails it).
			if ev.Action == "fail" && len(res.Failed) == 0 {
				res.Setup = cluster.LastLines(text, 40)
			}
			continue
		}
		switch ev.Action {
		case "pass":
			res.Passed = append(res.Passed, sp)
		case "fail":
			sp.Message = failureLines(text)
			res.Failed = append(res.Failed, sp)
		case "skip":
			sp.Message = skipReason(text)
			res.Skipped = append(res.Skipped, sp)
		}
		if progress != nil {
			note := ""
			if len(sp.NotMade) > 0 {
				note = fmt.Sprintf(" (without its %d SCTP pokes)", len(sp.NotMade))
			}
			progress("%s [%s] %s%s", strings.ToUpper(ev.Action), sp.Duration.Round(time.Second), name, note)
		}
	}
	for _, l := range [][]Spec{res.Passed, res.Failed, res.Skipped} {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Name < l[j].Name })
	}
	return res
}

// failureLines are the lines of a failed test's output that say what
// failed (the pokes and t.Errorf/Fatalf lines), at most 40.
func failureLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.Contains(t, "FAIL") || strings.Contains(t, "Error") || strings.Contains(t, "expected") ||
			strings.Contains(t, "rror:") || strings.Contains(t, "timed out") {
			keep = append(keep, t)
		}
	}
	if len(keep) > 40 {
		keep = append(keep[:40], fmt.Sprintf("... %d more", len(keep)-40))
	}
	return strings.Join(keep, "\n")
}

// notMade are the PokeNotMade lines of a test's output, from the marker
// on (without the file:line prefix of t.Logf).
func notMade(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, PokeNotMade); ok {
			lines = append(lines, PokeNotMade+rest)
		}
	}
	return lines
}

// skipReason is the line of a skipped test's output that gives the
// reason ("Skipping X: suite does not support Y").
func skipReason(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(l); strings.Contains(t, "Skipping") {
			return t
		}
	}
	return "skipped itself: " + cluster.LastLines(out, 3)
}

// importAgnhost imports agnhost with bash (upstream's manifests run
// `/bin/bash -c "/agnhost ..."`) as AgnhostImage on every node; the
// default command, as upstream's image has it, is `pause`.
func importAgnhost(ctx context.Context, c *cluster.Cluster, cfg Config) error {
	tree := filepath.Join(cfg.Dir, "agnhost-image")
	_ = os.RemoveAll(tree)
	files := map[string]string{cfg.Agnhost: "agnhost"}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return err
	}
	bash, err = filepath.EvalSymlinks(bash)
	if err != nil {
		return err
	}
	files[bash] = "bin/bash"
	libs, err := sharedLibs(ctx, bash)
	if err != nil {
		return err
	}
	for _, l := range libs {
		files[l] = strings.TrimPrefix(l, "/")
	}
	for from, to := range files {
		real, err := filepath.EvalSymlinks(from)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		dst := filepath.Join(tree, to)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return err
		}
	}
	tar := filepath.Join(cfg.Dir, "agnhost.tar")
	if _, err := ociimage.WriteFile(tar, AgnhostImage, tree, ociimage.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}); err != nil {
		return err
	}
	defer os.Remove(tar)
	return c.ImportImage(ctx, tar)
}

// sharedLibs lists the libraries bin loads and its loader, by the paths
// it asks for (ldd).
func sharedLibs(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}
