package main

import (
	"github.com/spf13/cobra"

	"github.com/routed-net/routed/routed/daemon"
)

func newClusterGCCmd() *cobra.Command {
	var cfg daemon.ClusterGCConfig
	cmd := &cobra.Command{
		Use:   "cluster-gc",
		Short: "Run the cluster-wide GC in a process of its own (nodes then run with --cluster-gc=false)",
		Long: `One process of the cluster, elected through etcd, removes the workload
endpoints of deleted nodes, frees leaked addresses cluster-wide and exports
the cluster's IPAM usage. By default the nodes elect it among themselves;
the pass reads every block of the cluster, so the elected node's memory
grows with the cluster's size (at 150,000 pods, 70-90 MiB more during a
pass). routed cluster-gc runs that pass in a Deployment of its own, as
calico-kube-controllers does: run the nodes with --cluster-gc=false
(ROUTED_CLUSTER_GC=false), as deploy/base does. Any number of replicas
may run; one leads at a time, and every write is fenced by its election.
It needs only etcd (etcd user routed-cluster-gc, see print-etcd-roles).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			setGCPercent()
			return daemon.RunClusterGC(cmd.Context(), cfg)
		},
	}
	cfg.BindFlags(cmd.Flags())
	return cmd
}
