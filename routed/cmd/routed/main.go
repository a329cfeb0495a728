// Command routed is the node daemon. It hosts felix, confd and the BGP
// speaker, and can run an embedded etcd for single-machine use.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := &cobra.Command{
		Use:           "routed",
		Short:         "routed node daemon: routes pod IPs and advertises them over BGP",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newEtcdCmd())
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
