// Command routed-etcd runs an embedded etcd member (pkg/etcdserver) for
// one machine, the demo and the tests; `routed etcd` runs it. It is its
// own binary, not part of routed: etcd's server (raft, bbolt, its gRPC
// gateway and tracing) would otherwise be linked into every node's
// routed, which never runs it (see docs/benchmarks.md, node memory).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/etcdserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newEtcdCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newEtcdCmd() *cobra.Command {
	var cfg etcdserver.Config
	cmd := &cobra.Command{
		Use:   "routed-etcd",
		Short: "Run an embedded etcd member (for one machine, the demo and tests)",
		Long: `Runs an etcd member, so a lab or a single machine needs no separate etcd
(` + "`routed etcd`" + ` runs this binary, installed beside routed). Production clusters
should point ETCD_ENDPOINTS at a real etcd cluster.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := etcdserver.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			logrus.WithField("endpoints", s.Endpoints).Info("embedded etcd serving")
			fmt.Fprintf(cmd.OutOrStdout(), "etcd ready at %s\n", s.Endpoints[0])
			select {
			case <-cmd.Context().Done():
				return nil
			case err := <-s.Err():
				return fmt.Errorf("embedded etcd failed: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "data-dir", "/var/lib/routed/etcd", "where etcd keeps its data")
	f.StringVar(&cfg.ClientAddr, "listen-client", "127.0.0.1:2379", "host:port for clients (port 0 picks one)")
	f.StringVar(&cfg.PeerAddr, "listen-peer", "127.0.0.1:0", "host:port for the peer listener (port 0 picks one; give a fixed one with --initial-cluster)")
	f.StringVar(&cfg.Name, "name", "routed", "this member's name")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member of a new static cluster, this one's included (empty: a single member)")
	f.StringVar(&cfg.PeerTLS.CertFile, "peer-cert-file", "", "serve and dial peers over TLS with this certificate")
	f.StringVar(&cfg.PeerTLS.KeyFile, "peer-key-file", "", "key for --peer-cert-file")
	f.StringVar(&cfg.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "require peer certificates signed by this CA")
	f.StringVar(&cfg.TLS.CertFile, "cert-file", "", "serve clients over TLS with this certificate")
	f.StringVar(&cfg.TLS.KeyFile, "key-file", "", "key for --cert-file")
	f.StringVar(&cfg.TLS.TrustedCAFile, "trusted-ca-file", "", "require client certificates signed by this CA")
	cmd.PreRun = func(*cobra.Command, []string) {
		cfg.TLS.ClientCertAuth = cfg.TLS.TrustedCAFile != ""
		cfg.PeerTLS.ClientCertAuth = cfg.PeerTLS.TrustedCAFile != ""
	}
	return cmd
}
