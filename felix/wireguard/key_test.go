package wireguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyStore: a key is made once (0600) and loaded after; Rotate
// replaces it; a key file others may read, or one that holds no key, is
// refused naming the file.
func TestKeyStore(t *testing.T) {
	ks := KeyStore{Path: filepath.Join(t.TempDir(), "state", KeyFileV4)}
	k1, err := ks.LoadOrCreate()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(ks.Path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if k2, err := ks.LoadOrCreate(); err != nil || k2 != k1 {
		t.Fatalf("second load: %v, same key %v", err, k2 == k1)
	}
	k3, err := ks.Rotate()
	if err != nil || k3 == k1 {
		t.Fatalf("rotate: %v, changed %v", err, k3 != k1)
	}
	if k4, _ := ks.LoadOrCreate(); k4 != k3 {
		t.Fatal("the rotated key was not stored")
	}
	if err := os.Chmod(ks.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.LoadOrCreate(); err == nil || !strings.Contains(err.Error(), ks.Path) || !strings.Contains(err.Error(), "0600") {
		t.Errorf("a world-readable key file: %v", err)
	}
	if err := os.Remove(ks.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ks.Path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.LoadOrCreate(); err == nil || !strings.Contains(err.Error(), "not a WireGuard key") {
		t.Errorf("a key file without a key: %v", err)
	}
}
