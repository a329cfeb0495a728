package ctl

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/migrate"
)

// newMigrateCmd carries a live Calico cluster's state over to routed.
func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Carry another system's cluster state over to routed"}
	var from datastore.Config
	var dryRun bool
	calico := &cobra.Command{
		Use:   "calico --from-etcd URL",
		Short: "Copy a Calico etcdv3 datastore's pools, nodes, BGP settings, endpoints and IPAM state",
		Long: `migrate calico reads a Calico etcdv3 datastore (/calico/resources/v3/...,
/calico/ipam/v2/...) and writes routed's IP pools, BGP configuration,
filters and peers, nodes, workload endpoints, IPAM configuration and
IPAM state (blocks with their node affinity, allocations and handles),
so pods that keep running keep their addresses and 'routedctl ipam
check' is clean.

It is idempotent: what routed already holds identically is left alone.
When routed holds anything that differs, nothing is written and the plan
names it. --dry-run prints the plan without writing. What cannot be
carried over (a refused Calico field, a block outside the carried pools,
an allocation type routed lacks) is listed; the rest is carried.

Calico's datastore is only read. Its etcd may be the same as routed's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(from.Endpoints) == 0 {
				return usageError("--from-etcd is required")
			}
			src, err := datastore.New(from)
			if err != nil {
				return fmt.Errorf("open Calico's etcd: %w", err)
			}
			defer src.Close()
			return g.with(func(c *datastore.Client) error {
				rep, err := migrate.Calico(cmd.Context(), src, c, dryRun)
				if rep != nil {
					printMigration(g, rep, dryRun)
				}
				return err
			})
		},
	}
	calico.Flags().StringSliceVar(&from.Endpoints, "from-etcd", nil, "Calico's etcd endpoints, comma separated")
	calico.Flags().StringVar(&from.CACertFile, "from-etcd-ca-cert-file", "", "CA to verify Calico's etcd")
	calico.Flags().StringVar(&from.CertFile, "from-etcd-cert-file", "", "client certificate for Calico's etcd")
	calico.Flags().StringVar(&from.KeyFile, "from-etcd-key-file", "", "client key for Calico's etcd")
	calico.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, write nothing")
	cmd.AddCommand(calico)
	return cmd
}

func printMigration(g *globals, rep *migrate.Report, dryRun bool) {
	tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tACTION\tDETAIL")
	counts := map[string]int{}
	for _, it := range rep.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Kind, it.Name, it.Action, it.Detail)
		counts[it.Action]++
	}
	for _, b := range rep.Blocks {
		fmt.Fprintf(tw, "IPAMBlock\t%s (%s)\t%s\t%s\n", b.CIDR, b.Node, b.Action, b.Detail)
		counts[b.Action]++
	}
	tw.Flush()
	for _, w := range rep.Warnings {
		fmt.Fprintf(g.errOut, "Warning: %s\n", w)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(g.out, "Not carried over: %s\n", s)
	}
	verb := "Migrated"
	if dryRun {
		verb = "Plan"
	}
	fmt.Fprintf(g.out, "%s: %d to create, %d to update, %d unchanged, %d conflicts, %d not carried over\n",
		verb, counts["create"], counts["update"], counts["unchanged"], counts["conflict"], len(rep.Skipped))
}
