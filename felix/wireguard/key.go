package wireguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Key file names in the state directory.
const (
	KeyFileV4 = "wireguard-private-key"
	KeyFileV6 = "wireguard-private-key-v6"
)

// KeyStore keeps one family's private key in a root-only file.
type KeyStore struct {
	Path string
}

// LoadOrCreate returns the stored key, making and storing a new one when
// there is none. A file that does not hold a key, or that others may
// read, is an error naming it: a key others could read is no secret.
func (k KeyStore) LoadOrCreate() (wgtypes.Key, error) {
	key, err := k.load()
	if errors.Is(err, fs.ErrNotExist) {
		return k.Rotate()
	}
	return key, err
}

func (k KeyStore) load() (wgtypes.Key, error) {
	st, err := os.Stat(k.Path)
	if err != nil {
		return wgtypes.Key{}, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return wgtypes.Key{}, fmt.Errorf("wireguard: key file %s: mode %v lets others read the private key; want 0600 (chmod 600 it, or remove it to make a new key)", k.Path, st.Mode().Perm())
	}
	b, err := os.ReadFile(k.Path)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: key file: %w", err)
	}
	key, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: key file %s: not a WireGuard key (base64 of 32 bytes): %w", k.Path, err)
	}
	return key, nil
}

// Rotate makes a new private key and stores it in place of the old one
// (written to a 0600 temporary file, then renamed over it).
func (k KeyStore) Rotate() (wgtypes.Key, error) {
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: generating a key: %w", err)
	}
	dir := filepath.Dir(k.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: key directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".wgkey-*") // created 0600
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(key.String() + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), k.Path)
	}
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: key file %s: %w", k.Path, err)
	}
	return key, nil
}
