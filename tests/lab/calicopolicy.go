package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CalicoDeny is a TCP flow toward a pod that a Calico policy denies:
// from an address (empty: any) to a pod address and port.
type CalicoDeny struct {
	From, To string
	Port     int
}

// StandInCalicoPolicy makes a node drop the given flows toward its pods
// with an nftables table `ip calico`, where Calico's felix keeps its
// rules in nftables mode. It stands in for Calico's enforcement of the
// policies being migrated (the lab runs calico-node's BIRD, not its
// felix): the same verdicts, not Calico's ruleset.
func (l *Lab) StandInCalicoPolicy(ctx context.Context, node string, denies []CalicoDeny) error {
	var b strings.Builder
	b.WriteString("table ip calico {\n  chain forward {\n    type filter hook forward priority filter; policy accept;\n")
	for _, d := range denies {
		b.WriteString("    oifname \"cali*\" ")
		if d.From != "" {
			fmt.Fprintf(&b, "ip saddr %s ", d.From)
		}
		fmt.Fprintf(&b, "ip daddr %s tcp dport %d drop\n", d.To, d.Port)
	}
	b.WriteString("  }\n}\n")
	f := filepath.Join(l.Dir, node, "calico-standin.nft")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if _, err := nsRun(ctx, node, "nft", "-f", f); err != nil {
		return fmt.Errorf("calico policy stand-in on %s: %w", node, err)
	}
	return nil
}

// ClearCalicoPolicy deletes Calico's nftables tables from a node, as
// docs/migrate-calico.md says once routed runs there (none is fine).
func (l *Lab) ClearCalicoPolicy(ctx context.Context, node string) error {
	for _, family := range []string{"ip", "ip6"} {
		if _, err := nsRun(ctx, node, "nft", "list", "table", family, "calico"); err != nil {
			continue // absent
		}
		if _, err := nsRun(ctx, node, "nft", "delete", "table", family, "calico"); err != nil {
			return err
		}
	}
	return nil
}
