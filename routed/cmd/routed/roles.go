package main

import (
	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/datastore"
)

func newPrintEtcdRolesCmd() *cobra.Command {
	var reflectors []string
	cmd := &cobra.Command{
		Use:   "print-etcd-roles",
		Short: "Print the etcdctl commands that create routed's least-privilege etcd roles and users",
		Long: `Prints etcdctl commands creating one etcd role and user per component:
routed-node (routed on every node), routed-cni (the CNI plugin: IPAM and
endpoint keys only), routed-rr (route reflectors: read only, plus each
reflector's own Node record) and routed-admin (routedctl). Users
authenticate with client certificates whose common name is the user name
(etcd --client-cert-auth). See docs/etcd-rbac.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return datastore.WriteEtcdctlRoles(cmd.OutOrStdout(), reflectors)
		},
	}
	cmd.Flags().StringSliceVar(&reflectors, "route-reflectors", nil, "node names of the route reflectors (each may write only its own Node record)")
	return cmd
}
