package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteDoesNotFollowSymlinks: a symlink planted at a guessable
// temporary name (.nodename.tmp), or at the file itself, is not written
// through: the victim keeps its content and the file is written.
func TestWriteDoesNotFollowSymlinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{".nodename.tmp", "nodename"} {
		if err := os.Symlink(victim, filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(filepath.Join(dir, "nodename"), []byte("node-1"), 0o644); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("symlink target overwritten: %q", b)
	}
	st, err := os.Lstat(filepath.Join(dir, "nodename"))
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
		t.Fatalf("nodename: %v %v, want a regular 0644 file", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "nodename")); string(b) != "node-1" {
		t.Fatalf("nodename = %q", b)
	}
}
