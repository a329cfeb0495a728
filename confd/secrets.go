package confd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
)

// DefaultSecretsDir is where Kubernetes Secrets named by BGPPeer
// password.secretKeyRef are mounted: <dir>/<secret name>/<key>.
const DefaultSecretsDir = "/etc/routed/bgp-secrets"

// ErrPassword wraps every failure to read a BGP password.
var ErrPassword = errors.New("confd: cannot read BGP password")

// readPassword reads a password from a file or a mounted secret. Errors
// name the file, never its content. A trailing newline (as left by
// editors and echo) is not part of the password.
func readPassword(src *api.PasswordSource, secretsDir string) (bgp.Secret, error) {
	var rel string
	switch {
	case src.File != "":
		// Only files in the secrets directory: a BGPPeer must not make
		// routed read (and send to a peer) any file of the host.
		r, err := filepath.Rel(secretsDir, filepath.Join(secretsDir, src.File))
		if filepath.IsAbs(src.File) {
			r, err = filepath.Rel(secretsDir, filepath.Clean(src.File))
		}
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("%w: password file %s is outside the secrets directory %s", ErrPassword, src.File, secretsDir)
		}
		rel = r
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		for _, part := range []string{ref.Name, ref.Key} {
			if part == "" || part == "." || part == ".." || strings.ContainsRune(part, '/') {
				return "", fmt.Errorf("%w: secretKeyRef %q/%q is not a valid secret name and key", ErrPassword, ref.Name, ref.Key)
			}
		}
		rel = filepath.Join(ref.Name, ref.Key)
	default:
		return "", fmt.Errorf("%w: password needs file or secretKeyRef", ErrPassword)
	}
	path := filepath.Join(secretsDir, rel)
	// os.Root keeps symlinks (Kubernetes' ..data links) inside the
	// directory: one pointing out of it fails.
	root, err := os.OpenRoot(secretsDir)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPassword, err)
	}
	defer root.Close()
	b, err := root.ReadFile(rel)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPassword, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrPassword, path)
	}
	if len(pw) > 80 { // TCP_MD5SIG_MAXKEYLEN
		return "", fmt.Errorf("%w: %s: password longer than 80 bytes", ErrPassword, path)
	}
	return bgp.Secret(pw), nil
}

// resolvePeers reads the passwords of specs. A peer whose password cannot
// be read is still returned, with ConfigError set, so that it shows in
// status as down and why.
func resolvePeers(specs []PeerSpec, secretsDir string) []bgp.Peer {
	out := make([]bgp.Peer, 0, len(specs))
	for _, s := range specs {
		p := s.Peer
		if s.PasswordSource != nil {
			pw, err := readPassword(s.PasswordSource, secretsDir)
			if err != nil {
				p.ConfigError = err.Error()
			} else {
				p.Password = pw
			}
		}
		out = append(out, p)
	}
	return out
}
