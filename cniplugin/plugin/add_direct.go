//go:build !cnithin

package plugin

import (
	"context"
	"fmt"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
)

// addDirect is ADD without routed: IPAM (routed-ipam in-process under
// the host IPAM lock, any other plugin executed), the veth pair, then
// the WorkloadEndpoint, each undone if a later step fails.
func (p *Plugin) addDirect(ctx context.Context, c *call, hostNS, contNS ns.NetNS) (*current.Result, error) {
	conf := c.conf
	store, err := p.openStore(conf)
	if err != nil {
		return nil, err
	}
	defer store.Close()

	var undo rollback
	success := false
	defer func() {
		if !success {
			undo.run(c.log)
		}
	}()

	ipam := ipamFor(c, store)
	r, err := ipam.add(ctx)
	if err != nil {
		return nil, fmt.Errorf("IPAM plugin %s failed to assign an address to %s: %w", conf.IPAM.Type, c.describe(), err)
	}
	undo.add("release addresses (IPAM "+conf.IPAM.Type+" DEL)", func() error { return ipam.del(ctx) })
	ipamResult, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("IPAM plugin %s returned an unreadable result: %w", conf.IPAM.Type, err)
	}
	ips, err := podAddresses(ipamResult, conf.IPAM.Type)
	if err != nil {
		return nil, err
	}

	contMAC, err := attach(c, hostNS, contNS, ips, nil, &undo)
	if err != nil {
		return nil, err
	}

	pod, err := p.podInfo(ctx, c)
	if err != nil {
		return nil, err
	}
	wep := c.buildEndpoint(ips, contMAC, pod)
	rev, err := writeEndpoint(ctx, store, wep)
	if err != nil {
		return nil, err
	}
	undo.add("delete WorkloadEndpoint "+wep.Metadata.Name, func() error {
		return deleteEndpoint(context.Background(), store, wep.Metadata.Name, rev)
	})

	if err := waitForPolicy(ctx, c, ips); err != nil {
		return nil, err
	}
	success = true
	return buildResult(c, ipamResult, ips, contMAC, contNS.Path()), nil
}

// releaseDirect undoes the datastore part of an ADD that routed did,
// when routed has gone since: the endpoint at revision rev, then the
// addresses.
func (p *Plugin) releaseDirect(ctx context.Context, c *call, wepName, rev string) error {
	store, err := p.openStore(c.conf)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := deleteEndpoint(ctx, store, wepName, rev); err != nil {
		return err
	}
	return ipamFor(c, store).del(ctx)
}
