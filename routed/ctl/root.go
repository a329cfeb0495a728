// Package ctl implements routedctl, the command-line client: resource
// CRUD against the datastore, IPAM tools, and status from the local
// routed over its socket.
package ctl

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/datastore"
)

// globals are the flags every subcommand shares.
type globals struct {
	ds     datastore.Config
	out    io.Writer
	errOut io.Writer
}

// connect opens the datastore with the global flags.
func (g *globals) connect() (*datastore.Client, error) {
	return datastore.New(g.ds)
}

// with connects, runs f and closes the connection.
func (g *globals) with(f func(*datastore.Client) error) error {
	c, err := g.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// NewRoot builds the routedctl command tree. Extra commands (IPAM,
// status) are added by the caller so this package stays small.
func NewRoot(out, errOut io.Writer) (*cobra.Command, func() (*datastore.Client, error)) {
	g := &globals{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:   "routedctl",
		Short: "Manage routed resources, IPAM and node status",
		Long: `routedctl reads and writes routed's resources in etcd (IPPool, Node,
BGPConfiguration, BGPPeer, WorkloadEndpoint, IPAMConfiguration), in routed's
own YAML/JSON format or Calico's projectcalico.org/v3 format.

Datastore flags default to ETCD_ENDPOINTS, ETCD_CA_CERT_FILE, ETCD_CERT_FILE
and ETCD_KEY_FILE.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	g.ds.BindFlags(root.PersistentFlags())
	root.AddCommand(
		newWriteCmd(g, "apply", "Create or replace resources from a file"),
		newWriteCmd(g, "create", "Create resources from a file; fails if any exists"),
		newWriteCmd(g, "replace", "Replace existing resources from a file; fails if any is missing"),
		newDeleteCmd(g),
		newGetCmd(g),
		newDatastoreCmd(g),
		newMigrateCmd(g),
		newVersionCmd(g),
	)
	return root, g.connect
}

// ExitCode maps an error from Execute to a process exit code.
func ExitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

// usageError is a mistake in how routedctl was called.
func usageError(format string, args ...any) error {
	return fmt.Errorf("usage: "+format, args...)
}
