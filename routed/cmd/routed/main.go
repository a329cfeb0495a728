// Command routed is the node daemon. It hosts felix, confd and the BGP
// speaker; `routed etcd` runs an embedded etcd (routed-etcd) for
// single-machine use.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/routed/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var cfg daemon.Config
	root := &cobra.Command{
		Use:   "routed",
		Short: "routed node daemon: routes pod IPs and advertises them over BGP",
		Long: `routed runs on every node (role node: dataplane, BGP, IPAM GC) or as a
dedicated route reflector (role route-reflector: BGP only).

Every flag can also be set from the environment: the names after "env",
routed's own first, then Calico's. Datastore: ETCD_ENDPOINTS,
ETCD_CA_CERT_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE. Node: NODENAME, IP
(ADDR/PREFIX or autodetect), IP_AUTODETECTION_METHOD (first-found,
interface=REGEX, can-reach=DEST). Default pool when none exists:
ROUTED_IPV4POOL_CIDR, _BLOCK_SIZE, _IPIP, _NAT_OUTGOING (or CALICO_IPV4POOL_*).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			setGCPercent()
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	cfg.BindFlags(root.Flags())
	root.AddCommand(newEtcdCmd(), newPrintEtcdRolesCmd(), newHealthCmd(), newVersionCmd(), newClusterGCCmd())
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// defaultGCPercent is the daemon's GOGC unless the environment sets one.
// routed's live heap is small and long-lived (GoBGP's tables and the
// node feed's cache), so the heap Go lets grow before a collection is
// most of its anonymous memory: at Go's 100 a route reflector with 100
// clients holding 24 MB live (before third_party/gobgp's smaller
// Adj-RIB-In) kept a 46 MB heap goal. 25 trades some collections for
// that memory; the daemon allocates little once in sync, and under a
// big cluster's churn (pkg/feed BenchmarkChurnHeld, 150,000 pods, 100
// pod writes a second) 25 instead of 50 held 4-5 MiB less heap for
// 4.4-6.9 ms of collector CPU a second more, scaled to a node's ~90 MB
// live heap roughly 10-20 MB less after churn for about 0.5 % of a core.
// Once in sync it is a floor: a small heap gets more (routed/daemon's
// tuneGC, up to 100), so that a collection waits for 8 MiB at least.
const defaultGCPercent = 25

// setGCPercent sets defaultGCPercent unless GOGC is set (then Go's
// runtime has already applied it).
func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
