package ctl

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/routed/flowagg"
)

// newFlowsCmd reads the flow aggregator's window.
func newFlowsCmd(out io.Writer) *cobra.Command {
	var (
		rc                  flowagg.ReaderConfig
		tokenFile, since, o string
		f                   flowagg.Filter
		follow              bool
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "Show connections and the policy verdicts that decided them, from the flow aggregator",
		Long: `Show the flows the cluster's aggregator (routed-controllers flows-aggregator)
holds: each node's connections to and from its pods grouped over a few
seconds, with the verdict and the tiers, policies and rules that decided
it (egress and ingress), what staged policies would decide, and the
connections, packets and bytes. Gaps (a node's routed restarted, batches
or records lost, the aggregator restarted) are printed as gaps.

The aggregator: --server (ROUTED_FLOWS_SERVER), its CA --ca-file
(ROUTED_FLOWS_CA_FILE) and the reader token --token-file
(ROUTED_FLOWS_TOKEN_FILE). With kubectl port-forward to the aggregator,
--server https://127.0.0.1:PORT. Each step of reaching it (TCP
connection, TLS handshake, the answer's headers) must end within
--timeout, and a stream may not fall silent for 45 s (the aggregator
writes a keep-alive every 15 s), or flows says which step timed out.

With --follow, a stream that breaks (the aggregator restarted, a
port-forward dropped) is reconnected with backoff (0.5 s to 10 s,
noted on stderr) and resumed after the last entry printed, without
printing any twice; when that entry is no longer in the aggregator's
window (it restarted, or evicted it), a gap says what may be missing.
Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o != "" && o != "json" && o != "wide" {
				return usageError("-o must be json or wide, not %q", o)
			}
			if f.Verdict != "" && f.Verdict != flowrec.Allow && f.Verdict != flowrec.Deny && f.Verdict != flowrec.Unknown {
				return usageError("--verdict must be allow, deny or unknown, not %q", f.Verdict)
			}
			if f.Port < 0 || f.Port > 65535 {
				return usageError("--port must be 1-65535, not %d", f.Port)
			}
			if timeout <= 0 {
				return usageError("--timeout must be positive, not %s", timeout)
			}
			if since != "" {
				t, err := flowagg.ParseSince(since, time.Now())
				if err != nil {
					return usageError("--since: %v", err)
				}
				f.Since = t
			}
			if tokenFile == "" {
				return usageError("--token-file (or ROUTED_FLOWS_TOKEN_FILE) is required: the aggregator serves no anonymous reader")
			}
			tok, err := os.ReadFile(tokenFile)
			if err != nil {
				return fmt.Errorf("reading the token: %w", err)
			}
			rc.Token = strings.TrimSpace(string(tok))
			c, err := newFlowsClient(rc, timeout)
			if err != nil {
				return err
			}
			p := newFlowPrinter(out, o)
			err = readFlows(cmd.Context(), c, f, follow, cmd.ErrOrStderr(), p.print)
			p.flush()
			if err != nil && cmd.Context().Err() != nil {
				return nil // interrupted while following
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&rc.URL, "server", os.Getenv("ROUTED_FLOWS_SERVER"), "the aggregator's URL (https://HOST:PORT)")
	fl.StringVar(&rc.CAFile, "ca-file", os.Getenv("ROUTED_FLOWS_CA_FILE"), "CA that signed the aggregator's certificate")
	fl.StringVar(&tokenFile, "token-file", os.Getenv("ROUTED_FLOWS_TOKEN_FILE"), "file holding the reader token")
	fl.StringVarP(&f.Namespace, "namespace", "n", "", "only flows with an end in this namespace")
	fl.StringVar(&f.Pod, "pod", "", "only flows with this pod at an end (NAME or NAMESPACE/NAME)")
	fl.StringVar(&f.Verdict, "verdict", "", "only flows with this verdict: allow, deny or unknown")
	fl.StringVar(&f.Policy, "policy", "", "only flows a policy, profile or tier of this name decided, passed or would decide (staged)")
	fl.IntVar(&f.Port, "port", 0, "only flows to this destination port (ICMP: type)")
	fl.StringVar(&f.Node, "node", "", "only flows recorded on this node")
	fl.StringVar(&since, "since", "", "only flows of intervals ending after this (RFC 3339 or a duration such as 10m)")
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing flows as they arrive")
	fl.DurationVar(&timeout, "timeout", defaultStepTimeout, "how long each step of reaching the aggregator may take: TCP connection, TLS handshake, the answer's headers")
	fl.StringVarP(&o, "output", "o", "", "json: one JSON object per line (flow or gap); wide: also the trace and staged verdicts")
	return cmd
}
