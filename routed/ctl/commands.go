package ctl

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/ipam/ipamcli"
	"github.com/routed-net/routed/routed/status/statuscli"
)

// New returns the full routedctl command tree: resources, IPAM, and the
// status of the local routed.
func New(out, errOut io.Writer) *cobra.Command {
	root, connect := NewRoot(out, errOut)
	ipamCmd := ipamcli.NewCommand(connect, out, ipamcli.WithNodeCheck(nodeCheck))
	ipamCmd.AddCommand(newReimportCmd(out))
	root.AddCommand(ipamCmd)
	for _, c := range statuscli.NewCommands(out) {
		if c.Name() == "policy" {
			c.AddCommand(newExplainCmd(connect, out))
		}
		root.AddCommand(c)
	}
	root.AddCommand(newFlowsCmd(out))
	return root
}
