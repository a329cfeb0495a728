package integration

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/routed/status/statuscli"
)

// statusCmd builds a root command holding the status commands, as
// routedctl does, with args set.
func statusCmd(out io.Writer, args ...string) *cobra.Command {
	root := &cobra.Command{Use: "routedctl", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(statuscli.NewCommands(out)...)
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(out)
	return root
}
