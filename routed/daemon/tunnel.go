package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/selector"
)

// ipipPoolsFor returns the enabled IPIP pools that select the node.
func ipipPoolsFor(ctx context.Context, ds *datastore.Client, node *api.Node) ([]string, error) {
	list, _, err := ds.List(ctx, api.KindIPPool)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range list {
		p := r.(*api.IPPool)
		if p.Spec.Disabled || p.Spec.IPIPMode == api.EncapNever || p.Spec.IPIPMode == "" {
			continue
		}
		sel, err := selector.Parse(p.Spec.NodeSelector)
		if err != nil || !sel.Evaluate(node.Metadata.Labels) {
			continue
		}
		names = append(names, p.Metadata.Name)
	}
	return names, nil
}

// EnsureTunnelAddress gives the node an IPIP tunnel address from an IPIP
// pool that selects it, and records it on the Node; when no IPIP pool
// applies it releases the address and clears the field. Idempotent: the
// tunnel handle makes a repeat allocation return the same address.
func EnsureTunnelAddress(ctx context.Context, ds *datastore.Client, ic *ipam.Client, name string) error {
	for i := 0; i < writeRetries; i++ {
		r, err := ds.Get(ctx, api.KindNode, name)
		if err != nil {
			return err
		}
		node := r.(*api.Node)
		if node.Spec.BGP == nil {
			return fmt.Errorf("tunnel address: node %q has no BGP address yet", name)
		}
		pools, err := ipipPoolsFor(ctx, ds, node)
		if err != nil {
			return err
		}
		handle := ipam.TunnelHandle(name)
		want := ""
		if len(pools) > 0 {
			addrs, err := ic.AutoAssign(ctx, ipam.AssignArgs{
				Node: name, HandleID: handle, Num: 1, Pools: pools,
				Attrs: ipam.Attributes{Type: ipam.TypeTunnel},
			})
			if err != nil {
				return fmt.Errorf("tunnel address for %q: %w", name, err)
			}
			want = addrs[0].String()
		} else if _, err := ic.ReleaseByHandle(ctx, handle); err != nil {
			return err
		}
		if node.Spec.BGP.IPv4IPIPTunnelAddr == want {
			return nil
		}
		node.Spec.BGP.IPv4IPIPTunnelAddr = want
		_, err = ds.Update(ctx, node)
		if errors.Is(err, datastore.ErrConflict) {
			continue
		}
		if err == nil {
			log.WithField("tunnelAddr", want).Info("IPIP tunnel address updated")
		}
		return err
	}
	return fmt.Errorf("tunnel address for %q: %w", name, datastore.ErrConflict)
}
