// Package testbin finds routed's binaries for end-to-end tests: the ones
// `make build` put in $ROUTED_BIN, or, when that is unset, binaries it
// builds once per test process.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var pkgs = map[string]string{
	"routed":             "./routed/cmd/routed",
	"routed-controllers": "./routed/cmd/routed-controllers",
	"routedctl":          "./routed/cmd/routedctl",
	"routed-cni":         "./cniplugin/cmd/routed-cni",
	"routed-ipam":        "./cniplugin/cmd/routed-ipam",
}

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Path returns the path of a routed binary, building it if needed.
func Path(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("ROUTED_BIN"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	pkg, ok := pkgs[name]
	if !ok {
		t.Fatalf("testbin: unknown binary %q", name)
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "routed-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d // shared by the tests of this process; removed by the OS tmp cleaner
	}
	p := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", p, pkg)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testbin: build %s: %v\n%s", name, err, out)
	}
	built[name] = p
	return p
}

// moduleRoot is the directory holding go.mod, found from this file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}
