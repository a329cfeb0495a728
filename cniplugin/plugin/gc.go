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
	"github.com/routed-net/routed/pkg/kernel"
)

// CmdGC removes what belongs to attachments of this network on this node
// that the runtime no longer lists in cni.dev/valid-attachments: their
// WorkloadEndpoints, host veths and addresses (released through the IPAM
// plugin's DEL, which works for any IPAM plugin; routed-ipam's runs
// in-process), then lets the IPAM plugin collect allocations that never
// got an endpoint (IPAM GC).
func (p *Plugin) CmdGC(args *skel.CmdArgs) error {
	return runVerb(args, "GC", p.gc)
}

func (p *Plugin) gc(ctx context.Context, c *call) error {
	conf := c.conf
	valid := make(map[types.GCAttachment]bool, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		valid[a] = true
	}
	store, err := p.openStore(conf)
	if err != nil {
		return err
	}
	defer store.Close()
	list, _, err := store.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return fmt.Errorf("list WorkloadEndpoints: %w", err)
	}
	ipam := ipamFor(c, store)
	release, err := ipam.staleReleaser()
	if err != nil {
		return err
	}
	var errs []error
	var removed int
	for _, r := range list {
		wep, ok := r.(*api.WorkloadEndpoint)
		if !ok {
			continue
		}
		s := wep.Spec
		if s.Node != c.node || !strings.HasPrefix(s.Handle, conf.Name+".") {
			continue // another node's, or another network's
		}
		if valid[types.GCAttachment{ContainerID: s.ContainerID, IfName: s.ContainerInterface}] {
			continue
		}
		log := c.log.WithFields(map[string]any{"endpoint": wep.Metadata.Name, "staleContainerID": s.ContainerID})
		log.Info("GC: removing stale attachment")
		if err := gcOne(ctx, store, release, wep); err != nil {
			log.WithError(err).Warn("GC: could not remove stale attachment")
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if err := ipam.gc(ctx); err != nil {
		errs = append(errs, fmt.Errorf("IPAM plugin %s GC: %w", conf.IPAM.Type, err))
	}
	c.log.Infof("GC done: %d stale attachments removed, %d valid attachments kept", removed, len(valid))
	return errors.Join(errs...)
}

// gcOne removes one stale attachment in DEL's order: host veth, endpoint,
// then its addresses (the IPAM plugin's DEL, run as that container).
func gcOne(ctx context.Context, store Store, release releaseFunc, wep *api.WorkloadEndpoint) error {
	s := wep.Spec
	if kernel.IsHostDeviceName(s.InterfaceName) {
		if err := delLink(s.InterfaceName); err != nil {
			return err
		}
	}
	if err := deleteEndpoint(ctx, store, wep.Metadata.Name, wep.Metadata.ResourceVersion); err != nil {
		return err
	}
	ifName := s.ContainerInterface
	if ifName == "" {
		ifName = s.Endpoint
	}
	if err := release(ctx, s.ContainerID, ifName); err != nil {
		return fmt.Errorf("release addresses of stale container %s: %w", s.ContainerID, err)
	}
	return nil
}
