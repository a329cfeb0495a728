//go:build !cnithin

package ipamcore

import (
	"context"
	"os"
	"slices"
	"strings"
)

// The node's blocks, kept from one verb to the next (ipam.WithBlockHint):
// a per-verb IPAM client then reads them with the pools and the node's
// affinities, so an ADD costs one read and one transaction. The file
// sits beside the host lock file and is written under the lock; it is
// only a hint, so a missing, stale or unreadable one costs one more
// read, never a wrong assignment.

// hintFile is the block hint's path for the lock file at lockFile.
func hintFile(lockFile string) string { return lockFile + ".blocks" }

// readHint returns the block keys in the hint file (nil when absent).
func readHint(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// saveHint records node's blocks for the next verb, when they changed.
// It must run under the host lock. Failures are logged, never returned:
// an ADD does not fail for its hint.
func (m *IPAM) saveHint(ctx context.Context, node string) {
	if m.hintPath == "" {
		return
	}
	keys, err := m.ipam.OwnBlocks(ctx, node)
	if err != nil || len(keys) == 0 || slices.Equal(keys, m.hint) {
		return
	}
	tmp := m.hintPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		m.log.WithError(err).Debug("could not write the block hint")
		return
	}
	if err := os.Rename(tmp, m.hintPath); err != nil {
		m.log.WithError(err).Debug("could not write the block hint")
		return
	}
	m.hint = keys
}
