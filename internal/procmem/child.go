package procmem

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// RunChild runs this test binary again with no tests (-test.run=^$) and
// env added to the environment, and decodes what it prints on stdout as
// JSON into v: how a benchmark measures a pass in a process of its own
// (its TestMain does the pass when it sees its variable in env).
func RunChild(tb testing.TB, env []string, v any) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("child %v: %v", env, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		tb.Fatalf("child %v printed %q: %v", env, out, err)
	}
}
