// Package testenv holds checks shared by routed's privileged tests.
package testenv

import (
	"os"
	"testing"
)

// RequireRoot stops a test that needs root when it does not have it:
// under CI (CI set) that is a failure, because CI runs as root and a skip
// there would hide one; elsewhere the test is skipped with a loud reason.
// what says what needs root, e.g. "network namespaces".
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("this test needs root (%s), and CI runs as root", what)
	}
	t.Skipf("!!! SKIPPED: this test needs root (%s); run it as root, as CI does !!!", what)
}
