package statuscli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/routed/status"
)

// wireguardSection prints the node's WireGuard devices and peers under
// node status: nothing when the node does not serve it or has it off.
func wireguardSection(ctx context.Context, out io.Writer, c *status.Client) error {
	w, ok, err := c.Wireguard(ctx)
	if err != nil {
		return err
	}
	if !ok || (!w.Enabled && !w.EnabledV6) {
		return nil
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "WireGuard encryption")
	for _, e := range w.Errors {
		fmt.Fprintf(out, "ERROR: %s\n", e)
	}
	for _, d := range w.Devices {
		fmt.Fprintf(out, "device %s (%s), public key %s, port %d, MTU %d\n", d.Name, d.Implementation, d.PublicKey, d.ListenPort, d.MTU)
		if len(d.Peers) == 0 {
			fmt.Fprintln(out, "No peers.")
			continue
		}
		t := table{header: []string{"PEER", "ENDPOINT", "ALLOWED IPS", "LATEST HANDSHAKE", "RX BYTES", "TX BYTES"}}
		for _, p := range d.Peers {
			t.add(p.Node, p.Endpoint, strings.Join(p.AllowedIPs, ","), age(p.LastHandshake, clock()), fmt.Sprint(p.RxBytes), fmt.Sprint(p.TxBytes))
		}
		t.write(out)
	}
	for _, h := range w.Held {
		fmt.Fprintf(out, "HELD: pod traffic to %s (%s): %s\n", h.Node, h.Device, h.Reason)
	}
	hostSection(out, w)
	if w.AllowClear {
		fmt.Fprintln(out, "Nodes without a key are reached in clear text (--wireguard-allow-clear).")
	}
	return nil
}

// hostSection says whether host encryption is on and, when it is, which
// nodes' host traffic is encrypted and which goes in clear, and why.
func hostSection(out io.Writer, w *status.Wireguard) {
	if !w.HostEncryption {
		fmt.Fprintln(out, "Host encryption: off (traffic between host addresses is not encrypted).")
		return
	}
	fmt.Fprintln(out, "Host encryption: on.")
	for _, warn := range w.HostWarnings {
		fmt.Fprintf(out, "WARNING: %s\n", warn)
	}
	var enc []string
	for _, h := range w.HostPeers {
		if h.Encrypted {
			enc = append(enc, h.Node+" ("+h.Device+")")
		}
	}
	if len(enc) > 0 {
		fmt.Fprintf(out, "Host traffic encrypted to: %s\n", strings.Join(enc, ", "))
	}
	for _, h := range w.HostPeers {
		if !h.Encrypted {
			fmt.Fprintf(out, "CLEAR: host traffic to %s (%s): %s\n", h.Node, h.Device, h.Reason)
		}
	}
}

// rotateCommand is "node wireguard-rotate-key".
func rotateCommand(out io.Writer, client func() *status.Client) *cobra.Command {
	return &cobra.Command{
		Use:   "wireguard-rotate-key",
		Short: "Make new WireGuard keys on the local node and publish them",
		Long: `Asks the local routed for new WireGuard private keys (for each family
that is on), programs them and publishes the public keys on the Node;
the other nodes update their peers from the Node record. Prints the new
public keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := client().RotateWireguardKeys(ctxOrBackground(cmd.Context()))
			if err != nil {
				return notRunning(out, err)
			}
			fmt.Fprintf(out, "IPv4 public key: %s\nIPv6 public key: %s\n", orNone(keys["publicKey"]), orNone(keys["publicKeyV6"]))
			return nil
		},
	}
}

func orNone(s string) string {
	if s == "" {
		return "(off)"
	}
	return s
}
