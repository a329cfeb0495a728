package ctl

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/datastore"
)

// newDatastoreCmd manages the cluster identity that protects nodes from a
// wiped, swapped or rolled-back datastore (datastore.ClusterInfo).
func newDatastoreCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "datastore",
		Short: "Show or change the datastore's cluster identity and ready flag",
		Long: `Every routed remembers its cluster's identity (a GUID in the datastore) and
the newest revision it saw. When the datastore has no identity (wiped or
replaced), another cluster's, an older revision (restored from an old
backup) or is marked not ready, the nodes keep their routes and BGP as they
are and report why on /readiness, until the datastore is restored or
re-initialised.`,
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the cluster identity and whether the datastore is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.with(func(c *datastore.Client) error {
				ci, err := c.GetClusterInfo(cmd.Context(), 0)
				if errors.Is(err, datastore.ErrNoClusterInfo) {
					fmt.Fprintln(g.out, "No cluster identity: the datastore is new, or was wiped or replaced.")
				}
				if err != nil {
					return err
				}
				printClusterInfo(g, ci)
				return nil
			})
		},
	}
	var window time.Duration
	reinit := &cobra.Command{
		Use:   "reinit",
		Short: "Accept this datastore as it is: give it a new identity every node adopts",
		Long: `reinit gives the datastore a new cluster identity that every node adopts,
ending the hold that a wiped, replaced or rolled-back datastore put them in.
Before a node follows the datastore again it puts back the pods it runs
that the datastore lacks, and removes its endpoints that no longer run
(` + "`routedctl ipam reimport`" + `; docs/etcd-restore.md): if that fails it keeps
holding and says why. Restore a backup instead if you have one.

Nodes adopt the new identity during --adopt-window only: a node that comes
back later, or a node of another cluster pointed here by mistake, holds
still as before (run reinit again to let it in).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if window <= 0 {
				return usageError("--adopt-window must be positive, not %s", window)
			}
			return g.with(func(c *datastore.Client) error {
				ci, err := c.ReinitClusterInfo(cmd.Context(), window)
				if err != nil {
					return err
				}
				printClusterInfo(g, ci)
				fmt.Fprintf(g.out, "Running nodes adopt this identity within seconds and resync from the datastore as it is; nodes that return by %s adopt it too.\n",
					ci.AdoptUntil.Format(time.RFC3339))
				return nil
			})
		},
	}
	reinit.Flags().DurationVar(&window, "adopt-window", datastore.DefaultAdoptWindow, "how long nodes that remember another identity adopt this one")
	setReady := &cobra.Command{
		Use:   "set-ready true|false",
		Short: "Mark the datastore ready or not; while not ready every node holds still",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ready, err := strconv.ParseBool(args[0])
			if err != nil {
				return usageError("set-ready takes true or false, not %q", args[0])
			}
			return g.with(func(c *datastore.Client) error {
				ci, err := c.SetDatastoreReady(cmd.Context(), ready)
				if err != nil {
					return err
				}
				printClusterInfo(g, ci)
				return nil
			})
		},
	}
	cmd.AddCommand(show, reinit, setReady)
	return cmd
}

func printClusterInfo(g *globals, ci *datastore.ClusterInfo) {
	fmt.Fprintf(g.out, "Cluster GUID:    %s\nDatastore ready: %t\nCreated:         %s\n", ci.GUID, ci.DatastoreReady, ci.Created.Format("2006-01-02T15:04:05Z"))
	if !ci.AdoptUntil.IsZero() {
		fmt.Fprintf(g.out, "Adopted until:   %s\n", ci.AdoptUntil.Format("2006-01-02T15:04:05Z"))
	}
}
