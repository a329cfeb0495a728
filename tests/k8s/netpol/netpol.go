// Package netpol runs Kubernetes' own NetworkPolicy conformance specs
// (test/e2e/network/netpol, the "Netpol" specs of sig-network) against
// a running cluster with routed installed, and reads their results
// from the suite's JUnit report.
//
// The specs create three namespaces of three agnhost pods each, apply
// NetworkPolicies and probe every pair of pods through their Services
// (kubectl exec of `agnhost connect`), comparing what passes with the
// truth table the spec expects. No registry is reachable here: agnhost
// is built from k8s.io/kubernetes at the cluster's version
// (kubeapiserver.BuildE2E) and imported into every node's containerd
// under each agnhost reference the suite names (`e2e.test
// --list-images`).
package netpol

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/routed-net/routed/internal/ociimage"
	"github.com/routed-net/routed/tests/k8s/cluster"
)

// Focus picks every spec of test/e2e/network/netpol: "[sig-network]
// Netpol ..." (TCP, the [LinuxOnly] UDP ones, the SCTP ones and the two
// "Netpol API" specs, which check the API server's side only).
const Focus = `\[sig-network\] Netpol `

// Skip is a group of specs left out because the cluster lacks what
// they need, with the reason.
type Skip struct {
	// Pattern is a ginkgo skip regexp over the spec's full name.
	Pattern string
	Reason  string
	// Lacking reports whether this machine lacks the feature; a skip
	// whose feature is present is not applied.
	Lacking func() bool
}

// Skips are the only specs ever skipped, each for a feature the cluster
// lacks on this machine. Everything else that Focus picks runs.
var Skips = []Skip{{
	Pattern: `\[Feature:SCTPConnectivity\]`,
	Reason: "SCTP traffic: this kernel has no SCTP (no /proc/net/sctp, and no module can be loaded), so no pod can open an SCTP socket " +
		"(the specs that put SCTP in a policy but probe TCP still run)",
	Lacking: func() bool {
		_, err := os.Stat("/proc/net/sctp")
		return err != nil
	},
}}

// Config says what to run.
type Config struct {
	// E2E and Agnhost are the binaries from kubeapiserver.BuildE2E.
	E2E, Agnhost string
	// Focus is a ginkgo focus regexp; "" means Focus (every spec).
	Focus string
	// Dir receives the JUnit report, the suite's log and the agnhost
	// image tarball.
	Dir string
	// Progress, when set, gets one line per finished spec.
	Progress func(string, ...any)
	// Parallel is how many specs run at once, each in an e2e.test
	// process of its own; 0 means 1.
	Parallel int
	// Timeout bounds the whole suite (ginkgo's --timeout); 0 means 3 h.
	Timeout time.Duration
	// PassedEarlier, when set, is an earlier run's result (ReadReports):
	// the specs that passed there are not run again and are counted
	// apart (Result.PassedEarlier), so a run that the machine's time cut
	// short can be finished by another.
	PassedEarlier *Result
}

// Result is the outcome of every spec Focus picks.
type Result struct {
	Passed, Failed []Spec
	// Skipped are the specs left out by Skips (Spec.Message names the
	// reason) or that skipped themselves.
	Skipped []Spec
	// NotRun are the specs an interrupt or the suite's timeout stopped
	// or kept from running.
	NotRun []Spec
	// PassedEarlier are the specs not run because they passed in the
	// earlier run of Config.PassedEarlier (EarlierLog).
	PassedEarlier []Spec
	EarlierLog    string
	// Log is the directory with each spec's report and output
	// (report/NNN/e2e.log).
	Log string
}

// Spec is one spec's outcome.
type Spec struct {
	Name     string
	Duration time.Duration
	// Message is the failure (with the probe matrices of the last
	// failed check) or the reason it was skipped.
	Message string
}

// Summary is the line `netpol: P passed, F failed, S skipped`.
// followed by how many did not run when an interrupt or the timeout
// stopped the suite.
func (r Result) Summary() string {
	s := fmt.Sprintf("netpol: %d passed, %d failed, %d skipped", len(r.Passed)+len(r.PassedEarlier), len(r.Failed), len(r.Skipped))
	if len(r.PassedEarlier) > 0 {
		s += fmt.Sprintf(" (%d of the passed in the earlier run %s, not run again)", len(r.PassedEarlier), r.EarlierLog)
	}
	if len(r.NotRun) > 0 {
		s += fmt.Sprintf(" (%d not run: the suite was interrupted or timed out)", len(r.NotRun))
	}
	return s
}

// Run imports agnhost into every node of c and runs every spec the
// focus picks against c as its admin, cfg.Parallel at a time, each in an
// e2e.test process of its own. The error is about running the suite
// (no spec list, a spec without a report); failed specs are in the
// Result.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config) (Result, error) {
	if cfg.Focus == "" {
		cfg.Focus = Focus
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Hour
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 1
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Result{}, err
	}
	if err := importAgnhost(ctx, c, cfg); err != nil {
		return Result{}, err
	}
	specs, err := ListSpecs(ctx, cfg.E2E, cfg.Focus, cfg.Dir)
	if err != nil {
		return Result{}, err
	}
	if len(specs) == 0 {
		return Result{}, fmt.Errorf("e2e.test holds no spec the focus %q picks", cfg.Focus)
	}
	var skips []string
	for _, s := range Skips {
		if s.Lacking() {
			skips = append(skips, s.Pattern)
		}
	}
	specs, earlier := leaveOutPassed(specs, cfg.PassedEarlier)
	reportDir := filepath.Join(cfg.Dir, "report")
	if cfg.PassedEarlier != nil && filepath.Clean(cfg.PassedEarlier.Log) == filepath.Clean(reportDir) {
		return Result{}, fmt.Errorf("the earlier run's reports are in %s, which this run replaces: copy them elsewhere first", reportDir)
	}
	_ = os.RemoveAll(reportDir)
	res, err := runSpecs(ctx, specs, cfg.Parallel, reportDir, cfg.Progress, func(ctx context.Context, spec, dir string) error {
		return runOne(ctx, c, cfg, spec, skips, dir)
	})
	res.PassedEarlier = earlier
	if cfg.PassedEarlier != nil {
		res.EarlierLog = cfg.PassedEarlier.Log
	}
	return res, err
}

// leaveOutPassed returns the specs that did not pass in earlier (all of
// them when earlier is nil) and those that did, as earlier recorded them.
func leaveOutPassed(specs []string, earlier *Result) (left []string, passed []Spec) {
	if earlier == nil {
		return specs, nil
	}
	byName := map[string]Spec{}
	for _, s := range earlier.Passed {
		byName[s.Name] = s
	}
	for _, name := range specs {
		if s, ok := byName["[It] "+name]; ok {
			passed = append(passed, s)
			continue
		}
		left = append(left, name)
	}
	return left, passed
}

// importAgnhost imports agnhost as every agnhost image e2e.test names,
// on every node.
func importAgnhost(ctx context.Context, c *cluster.Cluster, cfg Config) error {
	out, err := exec.CommandContext(ctx, cfg.E2E, "--list-images").Output()
	if err != nil {
		return fmt.Errorf("e2e.test --list-images: %w", err)
	}
	var tags []string
	for _, l := range strings.Fields(string(out)) {
		// The private-registry agnhost is for image pull tests only.
		if strings.Contains(l, "/agnhost:") && strings.HasPrefix(l, "registry.k8s.io/") {
			tags = append(tags, l)
		}
	}
	if len(tags) == 0 {
		return fmt.Errorf("e2e.test --list-images names no agnhost image:\n%s", out)
	}
	tree := filepath.Join(cfg.Dir, "agnhost-image")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(cfg.Agnhost)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tree, "agnhost"), b, 0o755); err != nil {
		return err
	}
	for i, tag := range tags {
		tar := filepath.Join(cfg.Dir, fmt.Sprintf("agnhost-%d.tar", i))
		if _, err := ociimage.WriteFile(tar, tag, tree, ociimage.Config{Entrypoint: []string{"/agnhost"}}); err != nil {
			return err
		}
		err := c.ImportImage(ctx, tar)
		os.Remove(tar)
		if err != nil {
			return err
		}
	}
	return nil
}

// junitSuites is the part of the suite's JUnit report read here.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name      string     `xml:"name,attr"`
			Status    string     `xml:"status,attr"`
			Time      float64    `xml:"time,attr"`
			Failure   *junitText `xml:"failure"`
			Error     *junitText `xml:"error"`
			Skipped   junitText  `xml:"skipped"`
			SystemErr string     `xml:"system-err"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// matchesSkip reports whether a Skips pattern picks the spec name.
func matchesSkip(name string) bool {
	for _, s := range Skips {
		if regexp.MustCompile(s.Pattern).MatchString(name) {
			return true
		}
	}
	return false
}

// junitText is a <failure> or <error> element.
type junitText struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// ReadJUnit sorts the specs of the suite's JUnit report at path that
// the focus regexp picks into passed, failed and skipped (with the
// reason from Skips, or the spec's own when it skipped itself). The
// suite's setup nodes ([SynchronizedBeforeSuite] ...) count as failures
// when they fail.
func ReadJUnit(path, focusRE string) (Result, error) {
	var res Result
	focus, err := regexp.Compile(focusRE)
	if err != nil {
		return res, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	var r junitSuites
	if err := xml.Unmarshal(b, &r); err != nil {
		return res, fmt.Errorf("%s: %w", path, err)
	}
	n := 0
	for _, s := range r.Suites {
		for _, tc := range s.Cases {
			sp := Spec{Name: tc.Name, Duration: time.Duration(tc.Time * float64(time.Second))}
			setup := !strings.HasPrefix(tc.Name, "[It]")
			if !setup && !focus.MatchString(tc.Name) {
				continue
			}
			if !setup {
				n++
			}
			switch tc.Status {
			case "passed":
				if !setup {
					res.Passed = append(res.Passed, sp)
				}
			case "interrupted", "aborted":
				sp.Message = failureText(tc.Status, tc.Failure, tc.Error, tc.SystemErr)
				res.NotRun = append(res.NotRun, sp)
			case "skipped", "pending":
				if setup {
					continue
				}
				// A focused spec skipped with no reason is one the
				// interrupt or the timeout kept from running (a spec
				// that skips itself gives its reason).
				if strings.TrimSpace(tc.Skipped.Message) == "skipped" && !matchesSkip(tc.Name) {
					res.NotRun = append(res.NotRun, sp)
					continue
				}
				sp.Message = "skipped by the spec itself: " + firstLines(tc.Skipped.Message+"\n"+tc.SystemErr, 3)
				for _, s := range Skips {
					if regexp.MustCompile(s.Pattern).MatchString(tc.Name) {
						sp.Message = s.Reason
					}
				}
				res.Skipped = append(res.Skipped, sp)
			default:
				sp.Message = failureText(tc.Status, tc.Failure, tc.Error, tc.SystemErr)
				res.Failed = append(res.Failed, sp)
			}
		}
	}
	if n == 0 {
		return res, errors.New("the JUnit report holds no spec the focus picks")
	}
	return res, nil
}

// failureText is a failed spec's status, the start of its failure and
// the probe matrices from its log.
func failureText(status string, failure, errElem *junitText, systemErr string) string {
	var b strings.Builder
	b.WriteString(status)
	for _, f := range []*junitText{failure, errElem} {
		if f != nil {
			fmt.Fprintf(&b, ": %s", strings.TrimSpace(f.Message+"\n"+firstLines(f.Text, 6)))
		}
	}
	if m := Matrices(systemErr); m != "" {
		b.WriteString("\n" + m)
	}
	return b.String()
}

// Matrices returns the probe matrices (expected, observed, comparison:
// X allowed, . blocked) of the last reachability check in a spec's log
// that found wrong answers.
func Matrices(log string) string {
	lines := strings.Split(log, "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, "reachability: correct:") && !strings.Contains(l, "incorrect:0,") {
			start = i
		}
	}
	if start < 0 {
		return ""
	}
	var out []string
	for _, l := range lines[start:] {
		// The comparison's last row is followed by the failure or the
		// next step.
		if strings.Contains(l, "[FAILED]") || strings.Contains(l, "STEP:") || strings.Contains(l, "VALIDATION") {
			break
		}
		if strings.TrimSpace(l) != "" {
			out = append(out, klogPrefix.ReplaceAllString(l, ""))
		}
	}
	return strings.Join(out, "\n")
}

// klogPrefix is the header of a framework.Logf line.
var klogPrefix = regexp.MustCompile(`^\s*[IWEF][0-9]{4} [0-9:.]+\s+[0-9]+ [^ ]+\] `)

func firstLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}
