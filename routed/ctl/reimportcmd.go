package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/ipam/ipamcli"
	"github.com/routed-net/routed/routed/reimport"
	"github.com/routed-net/routed/routed/status"
)

// newReimportCmd is `routedctl ipam reimport`: run on a node, it asks
// that node's routed to put back the pods it runs that the datastore
// lost (routed/reimport).
func newReimportCmd(out io.Writer) *cobra.Command {
	var dryRun bool
	var sock string
	cmd := &cobra.Command{
		Use:   "reimport [--dry-run] [--status-socket PATH]",
		Short: "Put back into the datastore the pods this node runs that it lost (after an etcd restore)",
		Long: `Run on a node after etcd was restored from a snapshot. The node's routed
compares the pods it runs (the endpoints it last trusted whose host
interface still exists) with the datastore and writes the difference:
each pod the snapshot lost gets its addresses back, under its own IPAM
handle, and its WorkloadEndpoint; this node's endpoints that the restore
brought back but that no longer run here are removed, their addresses
released. An address another holder has is not taken: that pod is
reported and left out.

routed writes only while the node holds (readiness says why, e.g. "the
datastore went back in time"): new pods are refused on the node then, so
nothing is half made. Nodes also do this by themselves before they follow
the datastore again (` + "`routedctl datastore reinit`" + `). --dry-run only reports,
at any time.

Exit status: 0 when the datastore holds every pod of the node, 1 when
some could not be put back (or, with --dry-run, something is missing),
2 when routed could not be asked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			rep, err := status.NewClient(status.SocketPath(sock)).Reimport(ctx, dryRun)
			if err != nil {
				return &ipamcli.ExitError{Code: 2, Err: fmt.Errorf("ipam reimport: %w", err)}
			}
			printReimport(out, rep)
			if n := rep.Problems(); n > 0 {
				return &ipamcli.ExitError{Code: 1, Err: fmt.Errorf("ipam reimport: %d problem(s)", n), Reported: true}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what the datastore lacks; write nothing")
	cmd.Flags().StringVar(&sock, "status-socket", "", "routed's status socket (default $"+status.EnvSocket+" or "+status.DefaultSocketPath+")")
	return cmd
}

// nodeCheck is `ipam check`'s local-node part (ipamcli.NodeCheck): asked
// with --local-node, or when ROUTED_STATUS_SOCKET names the node's
// socket; otherwise the check stays etcd-only (a routed answering on the
// default path may be another cluster's).
func nodeCheck(ctx context.Context, out io.Writer, local bool) (int, error) {
	if !local && os.Getenv(status.EnvSocket) == "" {
		return 0, nil
	}
	rep, err := status.NewClient(status.SocketPath("")).Reimport(ctx, true)
	if err != nil {
		return 0, fmt.Errorf("the local node's pods: %w", err)
	}
	fmt.Fprintln(out)
	printReimport(out, rep)
	return rep.Problems(), nil
}

// printReimport prints a re-import's report.
func printReimport(out io.Writer, rep *reimport.Report) {
	state := "follows the datastore"
	if rep.Held {
		state = "holds: " + rep.Why
	}
	fmt.Fprintf(out, "Node %s (%s): %d live pod interface(s).\n", rep.Node, state, rep.Live)
	verb := map[bool]string{true: "missing", false: "put back"}[rep.DryRun]
	list := func(title string, es []reimport.Entry) {
		if len(es) == 0 {
			return
		}
		fmt.Fprintf(out, "  %s: %d\n", title, len(es))
		for _, e := range es {
			pod := e.Namespace + "/" + e.Pod
			if e.Pod == "" {
				pod = "-"
			}
			line := fmt.Sprintf("    %-30s %-40s %-18s %s", pod, e.Endpoint, strings.Join(e.Addresses, ","), e.Interface)
			if e.Problem != "" {
				line += ": " + e.Problem
			}
			fmt.Fprintln(out, line)
		}
	}
	list("Live here, not in the datastore (lost by a restore?), "+verb, rep.Missing)
	list("In the datastore, not running here, "+map[bool]string{true: "to remove", false: "removed"}[rep.DryRun], rep.Stale)
	list("Could not be written", rep.Failed)
	list("Addresses in no pool of the datastore, not written", rep.Outside)
	switch {
	case rep.DryRun && len(rep.Missing)+len(rep.Stale) > 0:
		fmt.Fprintln(out, "  Put it right with `routedctl ipam reimport` on this node.")
	case len(rep.Missing)+len(rep.Stale) == 0:
		fmt.Fprintln(out, "  The datastore holds every pod of this node.")
	}
}
