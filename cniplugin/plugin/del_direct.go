//go:build !cnithin

package plugin

import (
	"context"
	"fmt"

	"github.com/routed-net/routed/pkg/api"
)

// delDirect is DEL without routed: the veth, the endpoint (if it is
// this container's), then the addresses, against etcd.
func (p *Plugin) delDirect(ctx context.Context, c *call) error {
	args, conf := c.args, c.conf
	// Deleting the container end waits for the kernel (an RCU grace
	// period: the slowest step of DEL), so the datastore connection is
	// set up and the endpoint read meanwhile. Only reads overlap it: the
	// endpoint and the addresses are still changed after the veth is gone.
	linkDone := make(chan error, 1)
	go func() { linkDone <- delContainerLink(c) }()
	store, err := p.openStore(conf)
	var wep *api.WorkloadEndpoint
	name := c.wepName()
	if err == nil {
		defer store.Close()
		wep, err = getEndpoint(ctx, store, name)
	}
	if lerr := <-linkDone; lerr != nil {
		return lerr
	}
	if err != nil {
		return err
	}
	// The host end is ours unless the endpoint of this name now belongs to
	// a newer sandbox of the same pod, whose veth has the same name.
	ours := wep == nil || wep.Spec.ContainerID == args.ContainerID
	if ours {
		if err := delLink(c.hostVeth); err != nil {
			return err
		}
	} else {
		c.log.Infof("WorkloadEndpoint %s belongs to container %s now; leaving %s alone", name, wep.Spec.ContainerID, c.hostVeth)
	}
	if wep != nil && ours {
		if err := deleteEndpoint(ctx, store, name, wep.Metadata.ResourceVersion); err != nil {
			return err
		}
	}
	if err := ipamFor(c, store).del(ctx); err != nil {
		return fmt.Errorf("IPAM plugin %s failed to release the addresses of %s: %w", conf.IPAM.Type, c.describe(), err)
	}
	return nil
}
