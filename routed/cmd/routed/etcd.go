package main

import (
	"fmt"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/etcdserver"
)

func newEtcdCmd() *cobra.Command {
	var cfg etcdserver.Config
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an embedded single-member etcd (for one machine, the demo and tests)",
		Long: `Runs etcd inside routed, so a lab or a single machine needs no separate etcd.
Production clusters should point ETCD_ENDPOINTS at a real etcd cluster.`,
		Args: cobra.NoArgs,
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
	f.StringVar(&cfg.PeerAddr, "listen-peer", "127.0.0.1:0", "host:port for the peer listener (single member; port 0 picks one)")
	f.StringVar(&cfg.TLS.CertFile, "cert-file", "", "serve clients over TLS with this certificate")
	f.StringVar(&cfg.TLS.KeyFile, "key-file", "", "key for --cert-file")
	f.StringVar(&cfg.TLS.TrustedCAFile, "trusted-ca-file", "", "require client certificates signed by this CA")
	cmd.PreRun = func(*cobra.Command, []string) {
		cfg.TLS.ClientCertAuth = cfg.TLS.TrustedCAFile != ""
	}
	return cmd
}
