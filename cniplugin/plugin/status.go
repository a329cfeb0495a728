//go:build !cnithin

package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// CmdStatus reports whether an ADD could succeed now: the datastore must
// answer and the IPAM plugin must be ready (for routed-ipam: some enabled
// pool serves this node). Failures carry code 50 (plugin not available).
func (p *Plugin) CmdStatus(args *skel.CmdArgs) error {
	return runVerb(args, "STATUS", func(ctx context.Context, c *call) error {
		if err := p.status(ctx, c); err != nil {
			return err
		}
		c.log.Debug("STATUS ready")
		return nil
	})
}

func (p *Plugin) status(ctx context.Context, c *call) error {
	store, err := p.openStore(c.conf)
	if err != nil {
		return err
	}
	defer store.Close()
	_, err = store.Get(ctx, api.KindIPAMConfiguration, "default")
	if err != nil && !datastore.IsNotFound(err) {
		return fmt.Errorf("%w: datastore at %s is not usable, pods cannot be added: %w", errNotReady, c.conf.EtcdEndpoints, err)
	}
	if err := ipamFor(c, store).status(ctx); err != nil {
		var te *types.Error
		if errors.As(err, &te) && (te.Code == types.ErrPluginNotAvailable || te.Code == types.ErrLimitedConnectivity) {
			return fmt.Errorf("IPAM plugin %s not ready: %w", c.conf.IPAM.Type, err)
		}
		return fmt.Errorf("%w: IPAM plugin %s not ready: %s", errNotReady, c.conf.IPAM.Type, strings.TrimSpace(err.Error()))
	}
	return nil
}
