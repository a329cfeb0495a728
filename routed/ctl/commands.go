package ctl

import (
	"io"

	"github.com/spf13/cobra"
)

// New returns the full routedctl command tree.
func New(out, errOut io.Writer) *cobra.Command {
	root, _ := NewRoot(out, errOut)
	return root
}
