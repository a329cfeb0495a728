package bgptest

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

var (
	aptMu      sync.Mutex
	aptUpdated bool
)

// EnsurePackages installs the Debian packages that provide the given
// commands when a command is missing: "apt-get update" once per process,
// then "apt-get install -y". bins maps command to package, e.g.
// {"bird": "bird2", "gobgpd": "gobgpd"}. It fails the test if the
// install fails (CI is expected to have network access to Debian).
func EnsurePackages(t testing.TB, bins map[string]string) {
	t.Helper()
	var missing []string
	for bin, pkg := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return
	}
	RequireRoot(t)
	aptMu.Lock()
	defer aptMu.Unlock()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if !aptUpdated {
		if out, err := runEnv(env, "apt-get", "update"); err != nil {
			t.Fatalf("apt-get update: %v\n%s", err, out)
		}
		aptUpdated = true
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, missing...)
	if out, err := runEnv(env, "apt-get", args...); err != nil {
		t.Fatalf("apt-get install %v: %v\n%s", missing, err, out)
	}
	for bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s still missing after installing %v", bin, missing)
		}
	}
}

func runEnv(env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
