package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"
)

// CmdDel detaches the container. It may run any number of times and
// after a half-done ADD: a missing namespace, interface, route, endpoint
// or allocation is success. Order matters: local teardown first (always
// possible), then the endpoint, and the addresses are released only
// after the endpoint naming them is gone.
func (p *Plugin) CmdDel(args *skel.CmdArgs) error {
	c, err := begin(args, "DEL")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	if err := p.del(context.Background(), c); err != nil {
		return c.finish("DEL", err)
	}
	c.log.Info("DEL done")
	return nil
}

func (p *Plugin) del(ctx context.Context, c *call) error {
	args, conf := c.args, c.conf
	c.log.WithField("netns", args.Netns).Info("DEL")

	// Deleting the container end removes the pair and the host routes on
	// it. The namespace may be gone already: then so is the veth, unless
	// something else holds the namespace open.
	if args.Netns != "" {
		err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error { return delLink(args.IfName) })
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		switch {
		case errors.As(err, &notExist), errors.As(err, &notNS):
			c.log.WithError(err).Debug("network namespace already gone")
		case err != nil:
			return fmt.Errorf("delete %s in %s: %w", args.IfName, args.Netns, err)
		}
	}

	store, err := p.openStore(conf)
	if err != nil {
		return err
	}
	defer store.Close()
	name := c.wepName()
	wep, err := getEndpoint(ctx, store, name)
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
	if err := invoke.DelegateDel(ctx, conf.IPAM.Type, args.StdinData, nil); err != nil {
		return fmt.Errorf("IPAM plugin %s failed to release the addresses of %s: %w", conf.IPAM.Type, c.describe(), err)
	}
	return nil
}
