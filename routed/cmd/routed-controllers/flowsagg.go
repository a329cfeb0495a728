package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/routed/flowagg"
)

// newFlowsAggregatorCmd runs the cluster's flow aggregator: a role of
// its own (one replica; it needs no datastore and no Kubernetes API).
func newFlowsAggregatorCmd() *cobra.Command {
	var cfg flowagg.Config
	var ids string
	cmd := &cobra.Command{
		Use:   "flows-aggregator",
		Short: "Collect the nodes' flow records and serve them to routedctl flows and a web page",
		Long: `Runs the cluster's flow aggregator. Nodes send their flows (grouped every
few seconds) over mutual TLS: a client certificate of --client-ca-file,
whose common name is routed-node (the nodes' shared identity, see
docs/etcd-rbac.md; --node-identities) or the name of the node whose
flows it sends. The aggregator keeps a bounded window (--max-entries,
--max-age) in memory and serves it to readers holding the token of
--token-file: routedctl flows, and the page at / (sign in with the
token; reach it with kubectl port-forward). Nothing is served to an
anonymous client but the sign-in form. See docs/flows.md.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch ids {
			case "":
			case "none":
				cfg.NodeIdentities = []string{} // per-node certificates only
			default:
				cfg.NodeIdentities = strings.Split(ids, ",")
			}
			srv, err := flowagg.NewServer(cfg)
			if err != nil {
				return err
			}
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", ":9443", "HTTPS address")
	f.StringVar(&cfg.CertFile, "cert-file", os.Getenv("FLOWS_CERT_FILE"), "server certificate (env FLOWS_CERT_FILE)")
	f.StringVar(&cfg.KeyFile, "key-file", os.Getenv("FLOWS_KEY_FILE"), "server key (env FLOWS_KEY_FILE)")
	f.StringVar(&cfg.ClientCAFile, "client-ca-file", os.Getenv("FLOWS_CLIENT_CA_FILE"), "CA of the nodes' client certificates, the cluster's etcd CA (env FLOWS_CLIENT_CA_FILE)")
	f.StringVar(&cfg.TokenFile, "token-file", os.Getenv("FLOWS_TOKEN_FILE"), "file holding the readers' token, at least 16 characters (env FLOWS_TOKEN_FILE)")
	f.StringVar(&ids, "node-identities", "", "comma-separated client certificate names that may send any node's flows (default routed-node; none: only per-node certificates, CN the node's name)")
	f.IntVar(&cfg.MaxEntries, "max-entries", 0, "entries the window keeps (default 100000)")
	f.DurationVar(&cfg.MaxAge, "max-age", 0, "age past which entries leave the window (default 1h)")
	f.IntVar(&cfg.MaxConns, "max-conns", flowagg.MaxConns, "nodes' connections held at once (a node holds one; past it a node is answered 503 and retries)")
	f.IntVar(&cfg.MaxReaderConns, "max-reader-conns", flowagg.MaxReaderConns, "signed-in readers' connections held at once (routedctl flows, the page)")
	f.IntVar(&cfg.MaxPendingConns, "max-pending-conns", flowagg.MaxPendingConns, "connections not yet authenticated held at once (more wait in the accept queue)")
	return cmd
}
