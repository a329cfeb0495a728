//go:build !cnithin

package plugin

import (
	"context"
	"fmt"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/cniplugin/ipamcore"
)

// addDirect is ADD without routed. With routed-ipam in-process it is
// what routed would do, done here (addLocal); with any other IPAM plugin
// (or a datastore that is not etcd) the plugin is executed first, then
// the veth pair is made and the WorkloadEndpoint written, each undone if
// a later step fails.
func (p *Plugin) addDirect(ctx context.Context, c *call, hostNS, contNS ns.NetNS) (*current.Result, error) {
	conf := c.conf
	store, err := p.openStore(conf)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	c.timeStore(store)

	var undo rollback
	success := false
	defer func() {
		if !success {
			undo.run(c.log)
		}
	}()

	ipam := ipamFor(c, store)
	if l, ok := ipam.(*localIPAM); ok && l.confErr == nil {
		res, err := p.addLocal(ctx, c, l, hostNS, contNS, &undo)
		success = err == nil
		return res, err
	}
	r, err := ipam.add(ctx)
	if err != nil {
		return nil, fmt.Errorf("IPAM plugin %s failed to assign an address to %s: %w", conf.IPAM.Type, c.describe(), err)
	}
	c.tm.mark("ipam")
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
	c.tm.mark("veth")

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
	c.tm.mark("endpoint")

	if err := waitForPolicy(ctx, c, ips); err != nil {
		return nil, err
	}
	success = true
	return buildResult(c, ipamResult, ips, contMAC, contNS.Path()), nil
}

// addLocal is ADD with routed-ipam in-process and routed not serving:
// what routed's CNI service does, done by the plugin. The addresses are
// assigned and the WorkloadEndpoint written (with a container MAC chosen
// here) in one etcd transaction under the host IPAM lock, while the veth
// pair is created; then both ends are configured. Every step done is
// registered with undo, which the caller runs on failure.
func (p *Plugin) addLocal(ctx context.Context, c *call, l *localIPAM, hostNS, contNS ns.NetNS, undo *rollback) (*current.Result, error) {
	wep, mac, err := p.newEndpoint(ctx, c)
	if err != nil {
		return nil, err
	}
	put := ipamcore.NewEndpointPut(wep)

	// The pair does not depend on the addresses: make it while etcd
	// works. Only the netlink calls overlap; each side registers its
	// undo step once both are done, so rollback stays ordered.
	type made struct {
		created bool
		err     error
	}
	veth := make(chan made, 1)
	go func() {
		_, created, err := createVeth(contNS, hostNS, c.args.IfName, c.hostVeth, c.conf.EffectiveMTU(c.log.Warnf), mac)
		veth <- made{created, err}
	}()
	addrs, ipamErr := l.assign(ctx, put, ipamcore.NewEndpointDel(wep.Metadata.Name, c.args.ContainerID, 0, true))
	c.tm.mark("ipam")
	v := <-veth
	if v.created {
		undo.add("delete veth "+c.hostVeth, func() error { return delLink(c.hostVeth) })
	}
	if ipamErr != nil {
		return nil, fmt.Errorf("IPAM plugin %s failed to assign an address to %s: %w", c.conf.IPAM.Type, c.describe(), ipamErr)
	}
	undo.add("release addresses and delete WorkloadEndpoint "+wep.Metadata.Name, func() error {
		return l.releaseWith(context.Background(), ipamcore.NewEndpointDel(wep.Metadata.Name, c.args.ContainerID, put.Rev(), true))
	})
	if v.err != nil {
		return nil, v.err
	}
	ipamResult := ipamcore.Result(addrs)
	ips, err := podAddresses(ipamResult, c.conf.IPAM.Type)
	if err != nil {
		return nil, err
	}
	if err := configure(c, contNS, ips, undo); err != nil {
		return nil, err
	}
	c.tm.mark("veth")
	if err := waitForPolicy(ctx, c, ips); err != nil {
		return nil, err
	}
	return buildResult(c, ipamResult, ips, mac, contNS.Path()), nil
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
