package cli

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/routed-net/routed/internal/version"
	"github.com/routed-net/routed/tests/testbin"
)

// TestVersionNamesGoBGP: `routed version` and `routedctl version` name
// the GoBGP release routed runs and routed's patch to it, and routed's
// build info (what `go version -m` and scanners read) records the
// release it requires and the directory that replaces it.
func TestVersionNamesGoBGP(t *testing.T) {
	for _, bin := range []string{"routed", "routedctl"} {
		out, err := exec.Command(testbin.Path(t, bin), "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		for _, want := range []string{bin + " ", "GoBGP " + version.GoBGPVersion + " with routed patch 1", "PATCHED.md"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s version does not say %q:\n%s", bin, want, out)
			}
		}
		if bin == "routed" && !strings.Contains(string(out), "build info: "+version.GoBGPModule+" "+version.GoBGPVersion+" => "+version.GoBGPReplace+"\n") {
			t.Errorf("routed version does not give its build info's GoBGP line:\n%s", out)
		}
		if strings.Contains(string(out), "NOT the") {
			t.Errorf("%s version says it was built from another GoBGP:\n%s", bin, out)
		}
	}
	out, err := exec.Command("go", "version", "-m", testbin.Path(t, "routed")).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\tdep\t"+version.GoBGPModule+"\t"+version.GoBGPVersion) {
		t.Errorf("go version -m routed does not record %s %s:\n%s", version.GoBGPModule, version.GoBGPVersion, out)
	}
}
