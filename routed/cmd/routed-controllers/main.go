// Command routed-controllers runs routed's Kubernetes controllers (what
// calico-kube-controllers does in etcd mode). It is its own binary, not a
// role of routed: client-go's informers and every Kubernetes API group
// they register would otherwise be mapped into each node's routed, about
// half of its executable (see docs/benchmarks.md, node memory).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/controllers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newControllersCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newControllersCmd() *cobra.Command {
	var ds datastore.Config
	cfg := controllers.Config{LeaseNamespace: os.Getenv("POD_NAMESPACE"), Identity: os.Getenv("POD_NAME")}
	var kubeconfig, healthListen string
	cmd := &cobra.Command{
		Use:   "routed-controllers",
		Short: "Keep routed's datastore in line with Kubernetes (like calico-kube-controllers)",
		Long: `Runs routed's Kubernetes controllers, one leader at a time (a Lease):
namespaces and service accounts become profiles kns.<ns> and
ksa.<ns>.<sa>, pods' labels, service accounts and named ports go onto
their WorkloadEndpoints, and each networking.k8s.io/v1 NetworkPolicy
becomes the routed NetworkPolicy knp.default.<name> in tier default,
and each ClusterNetworkPolicy (policy.networking.k8s.io/v1beta1, once
its CRD is installed) the GlobalNetworkPolicy kcnp.kube-admin.<name> or
kcnp.kube-baseline.<name> in tier kube-admin or kube-baseline.
A leader resyncs everything when it starts; what it wrote carries the
annotation routed.io/owner, and nothing else is changed or deleted.
Kubernetes: in-cluster, or --kubeconfig (KUBECONFIG). Datastore flags
default to ETCD_ENDPOINTS and the ETCD_*_FILE variables. Lease:
POD_NAMESPACE (default kube-system), identity POD_NAME (default host name).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := kubeRESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			if cfg.Kube, err = kubernetes.NewForConfig(rc); err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			if cfg.NetworkPolicyAPI, err = npclient.NewForConfig(rc); err != nil {
				return fmt.Errorf("network-policy-api client: %w", err)
			}
			store, err := datastore.New(ds)
			if err != nil {
				return err
			}
			defer store.Close()
			cfg.Store = store
			if healthListen == "" {
				return controllers.Run(cmd.Context(), cfg)
			}
			cfg.WatchDog = leaderelection.NewLeaderHealthzAdaptor(livezTolerance)
			return runWithLivez(cmd.Context(), healthListen, cfg)
		},
	}
	f := cmd.Flags()
	ds.BindFlags(f)
	f.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: in-cluster)")
	f.StringVar(&cfg.LeaseName, "lease-name", "routed-controllers", "name of the leader election Lease")
	f.BoolVar(&cfg.AutoHostEndpoints, "auto-host-endpoints", os.Getenv("AUTO_HOST_ENDPOINTS") == "true",
		"Calico's autoCreate: a \"*\" HostEndpoint <node>-auto-hep per Kubernetes node with the allow-all profile projectcalico-default-allow (env AUTO_HOST_ENDPOINTS=true); off, those written are removed")
	f.DurationVar(&cfg.Resync, "resync", 0, "how often everything is compared again (default 5m)")
	f.StringVar(&healthListen, "health-listen", os.Getenv("ROUTED_HEALTH_LISTEN"), "address for the liveness probe's /livez: fails once this replica leads but has not renewed its Lease for the Lease's duration plus 20 s (empty: off) (env ROUTED_HEALTH_LISTEN)")
	cmd.AddCommand(newFlowsAggregatorCmd())
	return cmd
}

func kubeRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, errors.Join(errors.New("not in a cluster and no --kubeconfig/KUBECONFIG"), err)
	}
	return rc, nil
}
