package plugin

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/cniapi"
)

// viaRouted reports whether this invocation may ask routed on the node
// (pkg/cniapi) instead of etcd: routed-ipam is the IPAM plugin and the
// socket is not turned off.
func (c *call) viaRouted() bool {
	return c.conf.IPAM.Type == ipamcore.PluginName && c.conf.RoutedSocket != SocketOff
}

// routedBudget bounds a request to routed as routed-ipam bounds its own
// work: the wait for the host lock plus the operation's timeout.
const routedBudget = ipamcore.DefaultLockWait + ipamcore.OpTimeout

// addViaRouted is ADD with routed doing the datastore part: it assigns
// the addresses and writes the endpoint in one etcd transaction, before
// the veth exists (the container MAC is chosen here so the endpoint can
// name it). It fails with cniapi.ErrUnreachable, having changed nothing,
// when routed is not serving: the caller then does the ADD itself.
func (p *Plugin) addViaRouted(ctx context.Context, c *call, hostNS, contNS ns.NetNS) (*current.Result, error) {
	if err := c.socketGone(); err != nil {
		return nil, err
	}
	req, err := c.conf.RoutedRequest(c.k8s, c.node, c.args.ContainerID, c.args.StdinData)
	if err != nil {
		return nil, fmt.Errorf("IPAM plugin %s failed to assign an address to %s: %w", c.conf.IPAM.Type, c.describe(), err)
	}
	wep, mac, err := p.newEndpoint(ctx, c)
	if err != nil {
		return nil, err
	}
	if req.Endpoint, err = json.Marshal(wep); err != nil {
		return nil, fmt.Errorf("encode WorkloadEndpoint %s: %w", wep.Metadata.Name, err)
	}
	cl := cniapi.NewClient(c.conf.Socket())
	rctx, cancel := context.WithTimeout(ctx, routedBudget)
	defer cancel()
	reply, err := cl.Add(rctx, req)
	if err != nil {
		if cniapi.IsUnreachable(err) {
			return nil, err
		}
		return nil, fmt.Errorf("IPAM plugin %s, run by routed (CNI socket %s), failed to assign an address to %s and write its WorkloadEndpoint: %w", c.conf.IPAM.Type, c.conf.Socket(), c.describe(), err)
	}
	c.log.WithField("ips", reply.IPs).Debug("routed assigned the addresses and wrote the WorkloadEndpoint")

	var undo rollback
	success := false
	defer func() {
		if !success {
			undo.run(c.log)
		}
	}()
	undo.add("release addresses and delete WorkloadEndpoint "+wep.Metadata.Name, func() error {
		return p.releaseViaRouted(context.Background(), c, cl, wep.Metadata.Name, reply.EndpointRevision)
	})
	ipamResult := ipamcore.Result(reply.IPs)
	ips, err := podAddresses(ipamResult, c.conf.IPAM.Type)
	if err != nil {
		return nil, err
	}
	if _, err := attach(c, hostNS, contNS, ips, mac, &undo); err != nil {
		return nil, err
	}
	if err := waitForPolicy(ctx, c, ips); err != nil {
		return nil, err
	}
	success = true
	return buildResult(c, ipamResult, ips, mac, contNS.Path()), nil
}

// releaseViaRouted undoes a routed ADD: routed releases the addresses
// and deletes the endpoint in one transaction; when routed has gone
// meanwhile, the plugin does both itself.
func (p *Plugin) releaseViaRouted(ctx context.Context, c *call, cl *cniapi.Client, wepName, rev string) error {
	req, err := c.conf.RoutedRequest(c.k8s, c.node, c.args.ContainerID, c.args.StdinData)
	if err != nil {
		return err
	}
	req.EndpointName = wepName
	rctx, cancel := context.WithTimeout(ctx, routedBudget)
	defer cancel()
	_, err = cl.Del(rctx, req)
	if !cniapi.IsUnreachable(err) {
		return err
	}
	return p.releaseDirect(ctx, c, wepName, rev)
}

// delViaRouted is DEL with routed doing the datastore part, after the
// container end is gone: it deletes the endpoint (if it is this
// container's) and releases the addresses in one etcd transaction. The
// host end is deleted afterwards, and only when the endpoint was ours: a
// newer sandbox of the pod has a host end of the same name. (Deleting
// the container end removes the pair; a host end outlives it only when
// the namespace was already unreachable.) It fails with
// cniapi.ErrUnreachable when routed is not serving.
func (p *Plugin) delViaRouted(ctx context.Context, c *call) error {
	if err := c.socketGone(); err != nil {
		return err
	}
	req, err := c.conf.RoutedRequest(c.k8s, c.node, c.args.ContainerID, c.args.StdinData)
	if err != nil {
		return fmt.Errorf("IPAM plugin %s failed to release the addresses of %s: %w", c.conf.IPAM.Type, c.describe(), err)
	}
	if err := delContainerLink(c); err != nil {
		return err
	}
	req.EndpointName = c.wepName()
	rctx, cancel := context.WithTimeout(ctx, routedBudget)
	defer cancel()
	reply, err := cniapi.NewClient(c.conf.Socket()).Del(rctx, req)
	if err != nil {
		if cniapi.IsUnreachable(err) {
			return err
		}
		return fmt.Errorf("IPAM plugin %s, run by routed (CNI socket %s), failed to release the addresses of %s and delete its WorkloadEndpoint: %w", c.conf.IPAM.Type, c.conf.Socket(), c.describe(), err)
	}
	if !reply.EndpointOurs {
		c.log.Infof("WorkloadEndpoint %s belongs to another container of the pod now; leaving %s alone", req.EndpointName, c.hostVeth)
		return nil
	}
	return delLink(c.hostVeth)
}

// socketGone fails with cniapi.ErrUnreachable, at the cost of one stat,
// when routed's CNI socket does not exist (routed stopped, or not yet
// started): the caller then does the work itself without first reading
// the pod from Kubernetes, or deleting the container end, for a request
// that cannot be sent. A DEL done directly overlaps that deletion with
// its etcd connection (delDirect). A socket that exists but that nobody
// accepts on (routed killed) is found out by the request itself.
func (c *call) socketGone() error {
	path := c.conf.Socket()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s: %w", cniapi.ErrUnreachable, path, err)
	}
	return nil
}

// randomMAC is a random, locally administered unicast MAC, as the kernel
// gives a veth.
func randomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, fmt.Errorf("random MAC: %w", err)
	}
	mac[0] = mac[0]&0xfe | 0x02
	return mac, nil
}
