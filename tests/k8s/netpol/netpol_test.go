package netpol

import (
	"context"
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadJUnit reads a report shaped like e2e.test's: the focus picks
// the Netpol specs only, a failure carries its probe matrices and not
// the log around them, a spec left out by Skips carries its reason, and
// the specs an interrupt stopped or kept from running are counted apart.
func TestReadJUnit(t *testing.T) {
	res, err := ReadJUnit("testdata/junit_01.xml", Focus)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Summary(); got != "netpol: 1 passed, 1 failed, 1 skipped (2 not run: the suite was interrupted or timed out)" {
		t.Fatalf("%s", got)
	}
	f := res.Failed[0]
	if !strings.Contains(f.Name, "egress access on one named port") || !strings.HasPrefix(f.Message, "failed: ") ||
		!strings.Contains(f.Message, "Had 2 wrong results") {
		t.Errorf("failure: %+v", f)
	}
	m := Matrices(f.Message)
	for _, want := range []string{"reachability: correct:70, incorrect:2, result=false", "expected:", "comparison:", "x/a\t.\tX"} {
		if !strings.Contains(m, want) {
			t.Errorf("matrices lack %q:\n%s", want, m)
		}
	}
	for _, not := range []string{"I1125", "Destroying namespace", "STEP:"} {
		if strings.Contains(m, not) {
			t.Errorf("matrices hold %q:\n%s", not, m)
		}
	}
	if s := res.Skipped[0]; s.Message != Skips[0].Reason {
		t.Errorf("skipped %s: %q, want the reason from Skips", s.Name, s.Message)
	}
	if _, err := ReadJUnit("testdata/junit_01.xml", "no such spec"); err == nil {
		t.Error("a focus that picks nothing: no error")
	}
}

// TestRunSpecs runs specs through a fake e2e.test that writes a JUnit
// report holding every spec (as the real one does, the others
// skipped): each spec is read with its own focus, results come back in
// the specs' order whatever order they finish in, a spec without a
// report is a failure and an error, and the specs a cancelled context
// kept from starting are not run.
func TestRunSpecs(t *testing.T) {
	specs := []string{
		"[sig-network] Netpol NetworkPolicy between server and client should enforce policy based on Ports [Feature:NetworkPolicy]",
		"[sig-network] Netpol [LinuxOnly] NetworkPolicy between server and client using UDP should enforce policy based on Ports [Feature:NetworkPolicy]",
		"[sig-network] Netpol NetworkPolicy between server and client should support allow-all policy [Feature:NetworkPolicy]",
		"[sig-network] Netpol NetworkPolicy between server and client should enforce updated policy [Feature:NetworkPolicy]",
	}
	status := map[string]string{specs[0]: "passed", specs[1]: "failed", specs[2]: "passed"} // specs[3]: no report
	fake := func(ctx context.Context, spec, dir string) error {
		if i := slices.Index(specs, spec); i == 0 {
			time.Sleep(20 * time.Millisecond) // finishes after the others
		}
		if status[spec] == "" {
			return errors.New("exit status 2")
		}
		var b strings.Builder
		b.WriteString(`<testsuites><testsuite name="Kubernetes e2e suite">`)
		for _, s := range specs {
			st := "skipped"
			if s == spec {
				st = status[spec]
			}
			fmt.Fprintf(&b, `<testcase name="[It] %s" status="%s" time="1"><skipped message="skipped"></skipped></testcase>`, html.EscapeString(s), st)
		}
		b.WriteString(`</testsuite></testsuites>`)
		return os.WriteFile(filepath.Join(dir, "junit_01.xml"), []byte(b.String()), 0o644)
	}
	dir := t.TempDir()
	res, err := runSpecs(context.Background(), specs, 3, dir, nil, fake)
	if err == nil {
		t.Error("a spec without a report: no error")
	}
	if got := res.Summary(); got != "netpol: 2 passed, 2 failed, 0 skipped" {
		t.Fatalf("%s", got)
	}
	if res.Passed[0].Name != "[It] "+specs[0] || res.Failed[0].Name != "[It] "+specs[1] || res.Failed[1].Name != "[It] "+specs[3] {
		t.Errorf("out of order or misread: %+v", res)
	}
	again, _ := ReadReports(dir)
	if again.Summary() != "netpol: 2 passed, 1 failed, 0 skipped" {
		t.Errorf("ReadReports: %s (the spec without a report is not in it)", again.Summary())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, _ = runSpecs(ctx, specs, 2, t.TempDir(), nil, fake)
	if len(res.NotRun)+len(res.Passed)+len(res.Failed) != len(specs) || len(res.NotRun) == 0 {
		t.Errorf("cancelled: %s", res.Summary())
	}
}

func TestLeaveOutPassed(t *testing.T) {
	specs := []string{"a passes", "b failed before", "c new"}
	earlier := &Result{Log: "/tmp/earlier",
		Passed: []Spec{{Name: "[It] a passes", Duration: time.Minute}, {Name: "[It] gone from this suite"}},
		Failed: []Spec{{Name: "[It] b failed before"}}}
	left, passed := leaveOutPassed(specs, earlier)
	if len(left) != 2 || left[0] != "b failed before" || left[1] != "c new" {
		t.Errorf("left to run: %q, want the failed and the new spec", left)
	}
	if len(passed) != 1 || passed[0].Name != "[It] a passes" || passed[0].Duration != time.Minute {
		t.Errorf("passed earlier: %+v, want only the spec that passed and is still in the suite", passed)
	}
	if left, passed := leaveOutPassed(specs, nil); len(left) != 3 || passed != nil {
		t.Errorf("without an earlier run: %q %v, want every spec", left, passed)
	}
	r := Result{Passed: []Spec{{Name: "x"}}, Failed: []Spec{{Name: "y"}}, PassedEarlier: passed, EarlierLog: "/tmp/earlier"}
	if got, want := r.Summary(), "netpol: 2 passed, 1 failed, 0 skipped (1 of the passed in the earlier run /tmp/earlier, not run again)"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}
