package netpol

import (
	"strings"
	"testing"
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
