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

// target is how one binary is built.
type target struct {
	pkg  string
	tags string
	// full is the build it hands over to, built beside it: a plugin's
	// full build (cniplugin/fullbin), routed-etcd for `routed etcd`.
	full string
}

// targets are built as the Makefile builds them: routed-cni and
// routed-ipam are the socket-only builds; routed runs routed-etcd for
// `routed etcd`.
var targets = map[string]target{
	"routed":             {pkg: "./routed/cmd/routed", full: "routed-etcd"},
	"routed-etcd":        {pkg: "./routed/cmd/routed-etcd"},
	"routed-controllers": {pkg: "./routed/cmd/routed-controllers"},
	"routedctl":          {pkg: "./routed/cmd/routedctl"},
	"routed-cni":         {pkg: "./cniplugin/cmd/routed-cni", tags: "cnithin", full: "routed-cni-full"},
	"routed-ipam":        {pkg: "./cniplugin/cmd/routed-ipam", tags: "cnithin", full: "routed-ipam-full"},
	"routed-cni-full":    {pkg: "./cniplugin/cmd/routed-cni"},
	"routed-ipam-full":   {pkg: "./cniplugin/cmd/routed-ipam"},
}

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Path returns the path of a routed binary, building it if needed; a
// socket-only plugin comes with its full build in the same directory,
// routed with routed-etcd.
func Path(t testing.TB, name string) string {
	t.Helper()
	tg, ok := targets[name]
	if !ok {
		t.Fatalf("testbin: unknown binary %q", name)
	}
	if d := os.Getenv("ROUTED_BIN"); d != "" {
		p := filepath.Join(d, name)
		_, err := os.Stat(p)
		if tg.full != "" && err == nil {
			_, err = os.Stat(filepath.Join(d, tg.full))
		}
		if err == nil {
			return p
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if tg.full != "" {
		build(t, tg.full)
	}
	return build(t, name)
}

// build builds name into the process's directory once; mu must be held.
func build(t testing.TB, name string) string {
	t.Helper()
	if p, ok := built[name]; ok {
		return p
	}
	tg := targets[name]
	if dir == "" {
		d, err := os.MkdirTemp("", "routed-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d // shared by the tests of this process; removed by the OS tmp cleaner
	}
	p := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-tags", tg.tags, "-o", p, tg.pkg)
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
