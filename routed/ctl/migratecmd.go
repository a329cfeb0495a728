package ctl

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/migrate"
)

// newMigrateCmd carries a live Calico cluster's state over to routed.
func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Carry another system's cluster state over to routed"}
	var from datastore.Config
	var dryRun, acceptLoss bool
	var kubeconfig string
	calico := &cobra.Command{
		Use:   "calico (--from-etcd URL | --from-kubeconfig FILE)",
		Short: "Copy a Calico cluster's pools, nodes, BGP settings, policies, endpoints and IPAM state",
		Long: `migrate calico reads a live Calico cluster's datastore and writes routed's
IP pools, BGP configuration, filters and peers, nodes, tiers, policies,
profiles, network sets, workload endpoints, IPAM configuration and IPAM
state (blocks with their node affinity, allocations and handles), so
pods that keep running keep their addresses and their policy, and
'routedctl ipam check' is clean.

Calico on etcd (--from-etcd): its keys /calico/resources/v3/... and
/calico/ipam/v2/... are read; its etcd may be the same as routed's.

Calico on the Kubernetes datastore (--from-kubeconfig, or in a pod with
neither flag: the pod's service account): Calico's custom resources
(crd.projectcalico.org/v1, or projectcalico.org/v3 where Calico keeps
them there) are read, and what Calico derives from
Kubernetes objects is derived the same way: a Node from each node's
projectcalico.org/ annotations, profiles from namespaces and service
accounts, a workload endpoint from each running pod Calico's CNI plugin
addressed (cni.projectcalico.org/podIPs, containerID). Kubernetes
NetworkPolicies stay in Kubernetes: routed-controllers convert them.

It is idempotent: what routed already holds identically is left alone.
When routed holds anything that differs, nothing is written and the plan
names it. --dry-run prints the plan without writing. What cannot be
carried over (a refused Calico field, a block outside the carried pools,
an allocation type routed lacks, a kind routed has no counterpart for)
is listed with what is lost; the rest is carried. An interrupted run
completes when run again. Calico's datastore is only read.

Policy is never weakened silently. A Calico resource that enforces or
shapes policy (a network policy, tier, profile, network set, host
endpoint, a FelixConfiguration setting failsafe ports, endpoint-to-host
action or WireGuard, a kind routed does not know) and cannot be carried
is listed as a POLICY LOSS with what routed would allow without it, and
the run (dry run included) writes nothing and exits non-zero. Fix it in
Calico and run again, or pass --accept-policy-loss to carry the rest
without it. Where a narrower form exists it is carried instead and
listed as "Narrowed": an Allow or Log rule with an HTTP match is
dropped, a Deny rule with one keeps its other matches (routed runs no
application-layer proxy); routed then denies at least what Calico did.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The plan, with what is not carried and why, is printed
			// before the first write; a run refused or stopped before
			// writing prints it at the end.
			planShown := false
			opts := migrate.Options{DryRun: dryRun, AcceptPolicyLoss: acceptLoss, Progress: func(it migrate.Item) {
				fmt.Fprintf(g.errOut, "created %s %s\n", it.Kind, it.Name)
			}, Planned: func(rep *migrate.Report) {
				printPlan(g, rep, acceptLoss)
				planShown = true
			}}
			run, err := migrationSource(cmd, from, kubeconfig)
			if err != nil {
				return err
			}
			return g.with(func(c *datastore.Client) error {
				rep, err := run(c, opts)
				if rep != nil {
					if !planShown {
						printPlan(g, rep, acceptLoss)
					}
					printSummary(g, rep, dryRun, acceptLoss)
				}
				if errors.Is(err, migrate.ErrPolicyLoss) {
					return fmt.Errorf("%w\nFix each POLICY LOSS above in Calico and run again, or pass --accept-policy-loss to carry the rest without them (routed then allows what they stopped)", err)
				}
				return err
			})
		},
	}
	calico.Flags().StringVar(&kubeconfig, "from-kubeconfig", "", "kubeconfig of a cluster whose Calico keeps its data in Kubernetes")
	calico.Flags().StringSliceVar(&from.Endpoints, "from-etcd", nil, "Calico's etcd endpoints, comma separated")
	calico.Flags().StringVar(&from.CACertFile, "from-etcd-ca-cert-file", "", "CA to verify Calico's etcd")
	calico.Flags().StringVar(&from.CertFile, "from-etcd-cert-file", "", "client certificate for Calico's etcd")
	calico.Flags().StringVar(&from.KeyFile, "from-etcd-key-file", "", "client key for Calico's etcd")
	calico.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, write nothing")
	calico.Flags().BoolVar(&acceptLoss, "accept-policy-loss", false,
		"carry the rest when Calico policy (policies, tiers, profiles, network sets, host endpoints, ...) cannot be carried; without it such a run writes nothing")
	cmd.AddCommand(calico)
	return cmd
}

// migrationSource opens the Calico datastore the flags name: etcd,
// a kubeconfig, or (neither given, inside a pod) the pod's API server.
func migrationSource(cmd *cobra.Command, from datastore.Config, kubeconfig string) (func(*datastore.Client, migrate.Options) (*migrate.Report, error), error) {
	ctx := cmd.Context()
	switch {
	case len(from.Endpoints) > 0 && kubeconfig != "":
		return nil, usageError("--from-etcd and --from-kubeconfig name two sources; give one")
	case len(from.Endpoints) > 0:
		return func(c *datastore.Client, o migrate.Options) (*migrate.Report, error) {
			src, err := datastore.New(from)
			if err != nil {
				return nil, fmt.Errorf("open Calico's etcd: %w", err)
			}
			defer src.Close()
			return migrate.Calico(ctx, src, c, o)
		}, nil
	}
	var rc *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("--from-kubeconfig %s: %w", kubeconfig, err)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster Kubernetes configuration: %w", err)
		}
	default:
		return nil, usageError("--from-etcd or --from-kubeconfig is required (or run in a pod, where the pod's service account is used)")
	}
	return func(c *datastore.Client, o migrate.Options) (*migrate.Report, error) {
		return migrate.CalicoKube(ctx, rc, c, o)
	}, nil
}

// printPlan prints what the migration does with each resource and
// block, what it narrows, and what it does not carry and why.
func printPlan(g *globals, rep *migrate.Report, acceptLoss bool) {
	tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tACTION\tDETAIL")
	for _, it := range rep.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Kind, it.Name, it.Action, it.Detail)
	}
	for _, b := range rep.Blocks {
		fmt.Fprintf(tw, "IPAMBlock\t%s (%s)\t%s\t%s\n", b.CIDR, b.Node, b.Action, b.Detail)
	}
	tw.Flush()
	for _, w := range rep.Warnings {
		fmt.Fprintf(g.errOut, "Warning: %s\n", w)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(g.out, "Note: %s\n", n)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(g.out, "Not carried over: %s\n", s)
	}
	for _, n := range rep.Narrowed {
		fmt.Fprintf(g.out, "Narrowed: %s %s: %s\n", n.Kind, n.Name, n.Change)
	}
	for _, l := range rep.PolicyLosses {
		fmt.Fprintf(g.out, "POLICY LOSS: %s\n", l)
	}
	if len(rep.PolicyLosses) > 0 && acceptLoss {
		// Loudly, where an operator watching the run looks: routed now
		// allows what these stopped in Calico.
		fmt.Fprintf(g.errOut, "WARNING: --accept-policy-loss: %d Calico resource(s) enforcing or shaping policy are NOT carried; routed allows what they stopped:\n", len(rep.PolicyLosses))
		for _, l := range rep.PolicyLosses {
			fmt.Fprintf(g.errOut, "WARNING: policy lost: %s\n", l)
		}
	}
}

// printSummary prints the counts of the plan or of what was done.
func printSummary(g *globals, rep *migrate.Report, dryRun, acceptLoss bool) {
	counts := map[string]int{}
	for _, it := range rep.Items {
		counts[it.Action]++
	}
	for _, b := range rep.Blocks {
		counts[b.Action]++
	}
	verb := "Migrated"
	if dryRun {
		verb = "Plan"
	}
	losses := ""
	if n := len(rep.PolicyLosses); n > 0 {
		losses = fmt.Sprintf(" (%d enforcing policy, refused)", n)
		if acceptLoss {
			losses = fmt.Sprintf(" (%d enforcing policy, loss accepted)", n)
		}
	}
	fmt.Fprintf(g.out, "%s: %d to create, %d to update, %d unchanged, %d conflicts, %d not carried over%s, %d narrowed\n",
		verb, counts["create"], counts["update"], counts["unchanged"], counts["conflict"], len(rep.Skipped)+len(rep.PolicyLosses), losses, len(rep.Narrowed))
}
