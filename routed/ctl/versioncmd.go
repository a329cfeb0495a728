package ctl

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/internal/version"
)

// newVersionCmd prints routedctl's build and the GoBGP routed of the
// same source runs.
func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print routedctl's build and the GoBGP routed runs (release and patch)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprint(g.out, version.String("routedctl"))
			return err
		},
	}
}
