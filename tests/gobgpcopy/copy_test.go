// Package gobgpcopy checks third_party/gobgp, the GoBGP routed links
// (go.mod replaces github.com/osrg/gobgp/v4 with it): the copy must be
// GoBGP's release from the Go module proxy plus exactly the change
// third_party/gobgp/PATCHED.diff holds (PATCHED.md says why), nothing
// more, so that what routed runs is what its version output names.
package gobgpcopy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/version"
)

// upstreamSum is the module proxy's hash of the release (go.sum's h1:
// form): a copy checked against anything else is not checked.
const upstreamSum = "h1:CoprkOZ2nsH8aTHij6xWj18QOrsBwG9D00l1PGw7394="

// ours are the files of the copy that are not GoBGP's.
var ours = map[string]bool{"PATCHED.md": true, "PATCHED.diff": true}

// download fetches the release from the module proxy (or finds it in the
// module cache, verified) and returns its directory.
func download(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mod := version.GoBGPModule + "@" + version.GoBGPVersion
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir() // outside routed's module: no replace applies
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || err != nil || m.Error != "" {
		t.Fatalf("go mod download -json %s: %v %s %s (%v): the check needs the Go module proxy", mod, err, m.Error, stderr.String(), jerr)
	}
	if m.Sum != upstreamSum {
		t.Fatalf("%s from the proxy has hash %s, want %s", mod, m.Sum, upstreamSum)
	}
	return m.Dir
}

// files lists the regular files under dir, relative, with / separators.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestCopyIsReleasePlusPatch: every file of third_party/gobgp is the
// release's file, after PATCHED.diff is applied to the release's files
// (git apply, which refuses a patch that does not fit); the copy holds
// whole packages (every non-test Go file of a directory it keeps); and
// PATCHED.diff changes only what PATCHED.md describes.
func TestCopyIsReleasePlusPatch(t *testing.T) {
	upstream := download(t)
	copyDir := filepath.Join("..", "..", "third_party", "gobgp")
	have := files(t, copyDir)
	if len(have) < 50 {
		t.Fatalf("%s holds %d files: not the copy", copyDir, len(have))
	}

	// The release's versions of the copy's files, patched in a scratch tree.
	scratch := t.TempDir()
	dirs := map[string]bool{}
	for _, f := range have {
		if ours[f] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(upstream, f))
		if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("third_party/gobgp/%s is not in %s %s", f, version.GoBGPModule, version.GoBGPVersion)
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(scratch, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		dirs[filepath.Dir(f)] = true
	}
	patch, err := filepath.Abs(filepath.Join(copyDir, "PATCHED.diff"))
	if err != nil {
		t.Fatal(err)
	}
	apply := exec.Command("git", "apply", "--whitespace=nowarn", patch)
	apply.Dir = scratch
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("PATCHED.diff does not apply to %s %s: %v\n%s", version.GoBGPModule, version.GoBGPVersion, err, out)
	}
	for _, f := range have {
		if ours[f] {
			continue
		}
		want, err := os.ReadFile(filepath.Join(scratch, f))
		if err != nil {
			continue // reported above
		}
		got, err := os.ReadFile(filepath.Join(copyDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("third_party/gobgp/%s differs from %s %s + PATCHED.diff: a change outside the documented patch (update PATCHED.diff and PATCHED.md, or restore the file)", f, version.GoBGPModule, version.GoBGPVersion)
		}
	}

	// Whole packages: a kept directory has every non-test Go file of the release's.
	for dir := range dirs {
		entries, err := os.ReadDir(filepath.Join(upstream, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			if _, err := os.Stat(filepath.Join(copyDir, dir, n)); err != nil {
				t.Errorf("third_party/gobgp/%s/%s is missing: the copy keeps whole packages", dir, n)
			}
		}
	}

	// The patch is the one PATCHED.md describes: the table package and
	// the server's first connection attempt.
	diff, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	var touched []string
	for _, line := range strings.Split(string(diff), "\n") {
		if rest, ok := strings.CutPrefix(line, "+++ b/"); ok {
			touched = append(touched, rest)
		}
	}
	if len(touched) == 0 {
		t.Fatal("PATCHED.diff changes no file")
	}
	for _, f := range touched {
		if !strings.HasPrefix(f, "internal/pkg/table/") && f != "pkg/server/fsm.go" {
			t.Errorf("PATCHED.diff changes %s, outside internal/pkg/table and pkg/server/fsm.go, which PATCHED.md does not describe", f)
		}
	}
}
