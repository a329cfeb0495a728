package lab

import "context"

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
