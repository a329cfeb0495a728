package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/pkg/cniapi"
)

// CmdDel detaches the container. It may run any number of times and
// after a half-done ADD: a missing namespace, interface, route, endpoint
// or allocation is success. Order matters: local teardown first (always
// possible), then the endpoint, and the addresses are released only
// after the endpoint naming them is gone.
func (p *Plugin) CmdDel(args *skel.CmdArgs) error {
	return runVerb(args, "DEL", func(ctx context.Context, c *call) error {
		if err := p.del(ctx, c); err != nil {
			return err
		}
		c.log.Info("DEL done")
		return nil
	})
}

func (p *Plugin) del(ctx context.Context, c *call) error {
	args := c.args
	c.log.WithField("netns", args.Netns).Info("DEL")
	if c.viaRouted() {
		err := p.delViaRouted(ctx, c)
		if !cniapi.IsUnreachable(err) {
			return err
		}
		c.tm.mark("socket")
		c.log.WithError(err).Info("routed is not serving CNI requests on this node; doing the DEL against etcd directly")
	}

	return p.delDirect(ctx, c)
}

// delContainerLink deletes the container end, which removes the pair and
// the host routes on it. The namespace may be gone already: then so is
// the veth, unless something else holds the namespace open.
func delContainerLink(c *call) error {
	netns, ifName := c.args.Netns, c.args.IfName
	if netns == "" {
		return nil
	}
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error { return delLink(ifName) })
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	switch {
	case errors.As(err, &notExist), errors.As(err, &notNS):
		c.log.WithError(err).Debug("network namespace already gone")
	case err != nil:
		return fmt.Errorf("delete %s in %s: %w", ifName, netns, err)
	}
	return nil
}
