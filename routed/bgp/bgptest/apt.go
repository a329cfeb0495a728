package bgptest

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// RequireCommands fails the test when a command a real BGP peer needs is
// missing, naming the Debian package that provides it. Tests install
// nothing themselves: tests/ensure-deps.sh (run by `make test` and `make
// deps`) does. bins maps command to package, e.g. {"bird": "bird2"}.
func RequireCommands(t testing.TB, bins map[string]string) {
	t.Helper()
	var missing []string
	for bin, pkg := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin+" (Debian package "+pkg+")")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("missing %s: run `make deps` (tests/ensure-deps.sh installs it)", strings.Join(missing, ", "))
	}
}
