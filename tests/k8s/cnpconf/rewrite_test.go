package cnpconf

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// upstreamDir is network-policy-api at Version in the module cache: a
// dependency of routed's own module (routed/controllers), so there
// without the network once routed builds.
func upstreamDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/network-policy-api@"+Version).Output()
	if err != nil {
		t.Fatalf("go mod download sigs.k8s.io/network-policy-api@%s: %v", Version, err)
	}
	var dl struct{ Dir string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
		t.Fatalf("go mod download: %v %s", err, out)
	}
	return dl.Dir
}

// TestRewriteHelper: upstream's helper.go at Version takes the hook
// once, at the top of PokeServer, and nothing else changes; a helper
// that is not the one the rewrite was written for fails with
// ErrUpstreamChanged.
func TestRewriteHelper(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(upstreamDir(t), helperFile))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	out, err := rewriteHelper(src)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, pokeHook) != 1 || !strings.Contains(out, pokeServerHead+pokeHook+pokeServerFirst) {
		t.Errorf("the hook is not at the top of PokeServer:\n%s", out)
	}
	if strings.Replace(out, pokeHook, "", 1) != src {
		t.Error("the rewrite changed more than the hook")
	}
	for name, bad := range map[string]string{
		"rewritten twice":       out,
		"signature changed":     strings.Replace(src, "shouldConnect bool) {\n\trequire.Eventually", "shouldConnect bool, extra int) {\n\trequire.Eventually", 1),
		"first line changed":    strings.Replace(src, pokeServerFirst, "\tassert.Eventually(t, func() bool {\n", 1),
		"a second agnhost exec": src + "\nvar x = \"/agnhost connect\"\n",
	} {
		if _, err := rewriteHelper(bad); !errors.Is(err, ErrUpstreamChanged) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCopyModule: upstream's module at Version copies with only the
// helper rewritten and the hook added; a Go file that pokes past
// PokeServer stops the copy.
func TestCopyModule(t *testing.T) {
	from := upstreamDir(t)
	dst := filepath.Join(t.TempDir(), "m")
	if err := copyModule(from, dst); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "go.sum", "conformance/tests/admin-network-policy-standard-gress-rules.go", "conformance/base/admin_tier/standard-port-range-rules-combined.yaml"} {
		a, errA := os.ReadFile(filepath.Join(from, f))
		b, errB := os.ReadFile(filepath.Join(dst, f))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s not copied as it is: %v %v", f, errA, errB)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, hookFile)); err != nil || string(b) != hookGo {
		t.Errorf("hook: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, helperFile)); err != nil || !strings.Contains(string(b), pokeHook) {
		t.Errorf("helper not rewritten: %v", err)
	}

	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "x.go"), []byte("package x\n\nvar cmd = \"/agnhost connect --protocol=sctp\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyModule(fake, filepath.Join(t.TempDir(), "m")); !errors.Is(err, ErrUpstreamChanged) {
		t.Errorf("a poke past PokeServer: %v", err)
	}
}

// TestHookGo runs the hook as the conformance binary would: it stops
// only SCTP pokes, only with NoSCTPEnv=1, and logs each one with the
// pod, the target and the verdict expected.
func TestHookGo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiles and runs a separate test binary")
	}
	dir := t.TempDir()
	hookTest := `package kubernetes

import "testing"

func TestHook(t *testing.T) {
	t.Log("sctp", routedSCTPPokeNotMade(t, "ns-a", "pod-0", "sctp", "10.1.2.3", 9003, true))
	t.Log("tcp", routedSCTPPokeNotMade(t, "ns-a", "pod-0", "tcp", "10.1.2.3", 80, false))
	t.Log("drop", routedSCTPPokeNotMade(t, "ns-b", "pod-1", "sctp", "fd00::3", 9005, false))
}
`
	for name, s := range map[string]string{"go.mod": "module x\n\ngo 1.26\n", "hook.go": hookGo, "hook_test.go": hookTest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(env string) string {
		cmd := exec.Command("go", "test", "-count=1", "-v", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", NoSCTPEnv+"="+env)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	on := run("1")
	for _, want := range []string{
		PokeNotMade + " ns-a/pod-0 -> 10.1.2.3:9003 over sctp, expected to connect (this kernel has no SCTP)",
		PokeNotMade + " ns-b/pod-1 -> [fd00::3]:9005 over sctp, expected to be dropped (this kernel has no SCTP)",
		"sctp true", "tcp false", "drop true",
	} {
		if !strings.Contains(on, want) {
			t.Errorf("with %s=1, no %q in\n%s", NoSCTPEnv, want, on)
		}
	}
	if got := notMade(on); len(got) != 2 {
		t.Errorf("the runner reads %d pokes not made: %q", len(got), got)
	}
	off := run("")
	if strings.Contains(off, PokeNotMade) || !strings.Contains(off, "sctp false") {
		t.Errorf("without %s, a poke was stopped:\n%s", NoSCTPEnv, off)
	}
}

// TestSkipsAreTheSCTPOnlyTests reads upstream's tests at Version: the
// tests skipped for want of SCTP are exactly those whose every
// PokeServer call is over SCTP; the others that poke over SCTP run,
// without those pokes.
func TestSkipsAreTheSCTPOnlyTests(t *testing.T) {
	dir := filepath.Join(upstreamDir(t), "conformance", "tests")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s: %v", dir, err)
	}
	var sctpOnly, mixed []string
	for _, f := range files {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Each test is a suite.ConformanceTest literal; its pokes are the
		// PokeServer calls inside it. A call outside every test (a shared
		// helper) could not be told apart, so it fails the test.
		inTests, all := 0, 0
		ast.Inspect(file, func(n ast.Node) bool {
			if isPoke(n) {
				all++
			}
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			name := shortName(lit)
			if name == "" {
				return true
			}
			pokes, sctp := 0, 0
			ast.Inspect(lit, func(n ast.Node) bool {
				if !isPoke(n) {
					return true
				}
				pokes++
				args := n.(*ast.CallExpr).Args
				if len(args) != 10 {
					t.Fatalf("%s: PokeServer with %d arguments, not upstream's 10", fset.Position(n.Pos()), len(args))
				}
				arg, ok := args[5].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s: a PokeServer protocol that is not a literal", fset.Position(n.Pos()))
				}
				if p, _ := strconv.Unquote(arg.Value); p == "sctp" {
					sctp++
				}
				return true
			})
			inTests += pokes
			switch {
			case pokes > 0 && sctp == pokes:
				sctpOnly = append(sctpOnly, name)
			case sctp > 0:
				mixed = append(mixed, name)
			}
			return true
		})
		if inTests != all {
			t.Fatalf("%s: %d of its %d PokeServer calls are outside a test", f, all-inTests, all)
		}
	}
	var skipped []string
	for _, s := range Skips {
		skipped = append(skipped, s.Test)
	}
	sort.Strings(sctpOnly)
	sort.Strings(skipped)
	if strings.Join(sctpOnly, " ") != strings.Join(skipped, " ") {
		t.Errorf("Skips %v, but the tests whose every poke is SCTP are %v", skipped, sctpOnly)
	}
	t.Logf("run without their SCTP pokes: %v", mixed)
	if len(mixed) == 0 {
		t.Error("no test mixes SCTP pokes with others: the hook would have nothing to do")
	}
}

func isPoke(n ast.Node) bool {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "PokeServer"
}

// shortName is the ShortName of a suite.ConformanceTest literal, "" for
// any other literal.
func shortName(lit *ast.CompositeLit) string {
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "ShortName" {
			if v, ok := kv.Value.(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(v.Value)
				return s
			}
		}
	}
	return ""
}
