package version

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoModAgrees: go.mod requires the GoBGP release this package names
// and replaces it with third_party/gobgp, whose PATCHED.md names the
// same release. A bump of one without the others fails here.
func TestGoModAgrees(t *testing.T) {
	root := filepath.Join("..", "..")
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\t" + GoBGPModule + " " + GoBGPVersion + "\n",
		"replace " + GoBGPModule + " => " + GoBGPReplace + "\n",
	} {
		if !strings.Contains(string(mod), want) {
			t.Errorf("go.mod has no line %q", strings.TrimSpace(want))
		}
	}
	doc, err := os.ReadFile(filepath.Join(root, "third_party", "gobgp", "PATCHED.md"))
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(doc), "\n"); first != "# GoBGP "+GoBGPVersion+", patched" {
		t.Errorf("third_party/gobgp/PATCHED.md starts %q, want it to name GoBGP %s", first, GoBGPVersion)
	}
}

// TestStringNamesGoBGP: the report names the release and the patch.
func TestStringNamesGoBGP(t *testing.T) {
	s := String("routed")
	for _, want := range []string{"routed ", "GoBGP " + GoBGPVersion, "patch", "PATCHED.md"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, does not say %q", s, want)
		}
	}
}
