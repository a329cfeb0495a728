package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/internal/version"
)

// newVersionCmd prints routed's build and the GoBGP it runs: the release
// and routed's patch to it, which the build info alone records only as a
// directory replacement ("(devel)").
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print routed's build and the GoBGP it runs (release and patch)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), version.String("routed"))
			return err
		},
	}
}
