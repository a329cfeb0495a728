package netpol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/routed-net/routed/tests/k8s/cluster"
)

// Specs run in parallel the way ginkgo's own -p would spread them, but
// without ginkgo's CLI: e2e.test lists the specs the focus picks
// (ginkgo's dry run), and each spec runs in an e2e.test process of its
// own whose focus is that spec's full name. The specs are independent:
// each creates its own namespaces (x-NNNN, y-NNNN, z-NNNN) and
// policies in them, none is [Serial], and Kubernetes' CI runs them with
// ginkgo -p. One process per spec costs the suite's setup (a few
// seconds) per spec, against specs of minutes, and keeps every worker
// busy until the queue is empty.

// ListSpecs returns the full names of the specs of e2e that focus
// picks, in the suite's order (e2e.test --ginkgo.dry-run; no cluster
// needed). dir receives the dry run's JSON report.
func ListSpecs(ctx context.Context, e2e, focus, dir string) ([]string, error) {
	report := filepath.Join(dir, "specs.json")
	out, err := exec.CommandContext(ctx, e2e, "--ginkgo.dry-run", "--ginkgo.no-color", "--ginkgo.focus", focus,
		"--ginkgo.json-report", report).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("e2e.test --ginkgo.dry-run: %w\n%s", err, cluster.LastLines(string(out), 20))
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return nil, err
	}
	var suites []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeType            string
			LeafNodeText            string
			State                   string
		}
	}
	if err := json.Unmarshal(b, &suites); err != nil {
		return nil, fmt.Errorf("%s: %w", report, err)
	}
	var specs []string
	for _, s := range suites {
		for _, r := range s.SpecReports {
			// A dry run "passes" the specs it picks.
			if r.LeafNodeType != "It" || r.State != "passed" {
				continue
			}
			texts := append(slices.Clone(r.ContainerHierarchyTexts), r.LeafNodeText)
			texts = slices.DeleteFunc(texts, func(t string) bool { return t == "" })
			specs = append(specs, strings.Join(texts, " "))
		}
	}
	return specs, nil
}

// SpecFocus is the ginkgo focus that picks exactly the spec with this
// full name: ginkgo matches the suite's description, a space and the
// spec's full name, and no other spec's name ends in this one (the UDP
// and SCTP variants differ in the middle).
func SpecFocus(name string) string { return " " + regexp.QuoteMeta(name) + "$" }

// runSpecs runs every spec with run, parallel at a time, spec i in
// dir/NNN (which also gets the spec's focus in a file "focus"), and
// merges what their reports say in the specs' order. A spec the
// context kept from starting is NotRun.
func runSpecs(ctx context.Context, specs []string, parallel int, dir string, report func(string, ...any),
	run func(ctx context.Context, spec, dir string) error) (Result, error) {
	results := make([]Result, len(specs))
	errs := make([]error, len(specs))
	queue := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished := 0
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range queue {
				results[i], errs[i] = runAndRead(ctx, specs[i], filepath.Join(dir, fmt.Sprintf("%03d", i)), run)
				if report == nil {
					continue
				}
				mu.Lock()
				finished++
				report("[%d/%d] %s", finished, len(specs), oneLine(results[i], errs[i], specs[i]))
				mu.Unlock()
			}
		}()
	}
	started := 0
feed:
	for i := range specs {
		select {
		case queue <- i:
			started++
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	var res Result
	for i := range specs {
		if i >= started {
			res.NotRun = append(res.NotRun, Spec{Name: "[It] " + specs[i]})
			continue
		}
		res.add(results[i])
	}
	res.Log = dir
	return res, errors.Join(errs...)
}

// runAndRead runs one spec in dir and reads its report.
func runAndRead(ctx context.Context, spec, dir string, run func(ctx context.Context, spec, dir string) error) (Result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, err
	}
	focus := SpecFocus(spec)
	if err := os.WriteFile(filepath.Join(dir, "focus"), []byte(focus), 0o644); err != nil {
		return Result{}, err
	}
	runErr := run(ctx, spec, dir)
	res, err := ReadJUnit(filepath.Join(dir, "junit_01.xml"), focus)
	if err != nil {
		if ctx.Err() != nil {
			return Result{NotRun: []Spec{{Name: "[It] " + spec}}}, nil
		}
		return Result{Failed: []Spec{{Name: "[It] " + spec, Message: fmt.Sprintf("no report: %v; e2e.test: %v; its output is in %s",
			err, runErr, filepath.Join(dir, "e2e.log"))}}}, fmt.Errorf("%s: %w", spec, err)
	}
	return res, nil
}

// oneLine is the progress line of a finished spec.
func oneLine(r Result, err error, spec string) string {
	for _, g := range []struct {
		what  string
		specs []Spec
	}{{"FAILED", r.Failed}, {"NOT RUN", r.NotRun}, {"SKIPPED", r.Skipped}, {"passed", r.Passed}} {
		if len(g.specs) > 0 {
			return fmt.Sprintf("%s [%s] %s", g.what, g.specs[0].Duration.Round(time.Second), spec)
		}
	}
	return fmt.Sprintf("NO RESULT (%v) %s", err, spec)
}

// runOne runs the spec named spec in an e2e.test process of its own
// against c, its JUnit report and output in dir.
func runOne(ctx context.Context, c *cluster.Cluster, cfg Config, spec string, skips []string, dir string) error {
	args := []string{
		"--kubeconfig", c.Kubeconfig,
		"--report-dir", dir,
		"--ginkgo.focus", SpecFocus(spec),
		"--ginkgo.timeout", cfg.Timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
		// The control plane runs as plain processes, not pods: nothing
		// in kube-system must be Ready beyond routed's own.
		"--minStartupPods", "0",
	}
	if len(skips) > 0 {
		args = append(args, "--ginkgo.skip", strings.Join(skips, "|"))
	}
	logFile, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, cfg.E2E, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	// The spec's temporary files (kubectl's cache) stay under dir.
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Cancelled (Ctrl-C, the caller's deadline): ginkgo's interrupt, so
	// that it cleans up the spec's namespaces and still writes the
	// report of what ran.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	return cmd.Run()
}

// add appends o's specs to r's.
func (r *Result) add(o Result) {
	r.Passed = append(r.Passed, o.Passed...)
	r.Failed = append(r.Failed, o.Failed...)
	r.Skipped = append(r.Skipped, o.Skipped...)
	r.NotRun = append(r.NotRun, o.NotRun...)
}

// ReadReports reads the reports of an earlier run (Config.Dir/report):
// each spec's JUnit report with the focus it ran with.
func ReadReports(dir string) (Result, error) {
	focuses, err := filepath.Glob(filepath.Join(dir, "[0-9][0-9][0-9]", "focus"))
	if err != nil {
		return Result{}, err
	}
	if len(focuses) == 0 {
		return Result{}, fmt.Errorf("%s holds no spec's report", dir)
	}
	var res Result
	var errs []error
	for _, f := range focuses {
		focus, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r, err := ReadJUnit(filepath.Join(filepath.Dir(f), "junit_01.xml"), string(focus))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.add(r)
	}
	res.Log = dir
	return res, errors.Join(errs...)
}
