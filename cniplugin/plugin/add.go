package plugin

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/pkg/cniapi"
)

// CmdAdd attaches the container: IPAM (routed-ipam in-process, any other
// plugin executed), veth pair, addresses and routes on both sides, then
// the WorkloadEndpoint. Any failure undoes every step done so far,
// including the address assignment.
func (p *Plugin) CmdAdd(args *skel.CmdArgs) error {
	c, err := begin(args, "ADD")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	result, err := p.add(context.Background(), c)
	if err != nil {
		return c.finish("ADD", err)
	}
	c.log.WithField("ips", resultIPs(result)).Infof("ADD done: %s on %s", args.IfName, c.hostVeth)
	return types.PrintResult(result, c.conf.CNIVersion)
}

func (p *Plugin) add(ctx context.Context, c *call) (*current.Result, error) {
	args := c.args
	c.log.WithFields(map[string]any{"ifname": args.IfName, "netns": args.Netns, "hostVeth": c.hostVeth, "node": c.node}).Info("ADD")

	hostNS, err := ns.GetCurrentNS()
	if err != nil {
		return nil, fmt.Errorf("open host network namespace: %w", err)
	}
	defer hostNS.Close()
	contNS, err := ns.GetNS(args.Netns)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", errNetNS, args.Netns, err)
	}
	defer contNS.Close()

	// Cheap early refusal before anything is allocated; createVeth still
	// catches the race where the name appears in between.
	if exists, err := linkExists(c.hostVeth); err != nil {
		return nil, err
	} else if exists {
		return nil, fmt.Errorf("%w: host interface %s for %s already exists (an earlier sandbox of this pod that was not deleted?); run CNI DEL for that sandbox or delete the interface, then retry",
			errInterfaceExists, c.hostVeth, c.describe())
	}

	c.tm.mark("netns")
	if c.viaRouted() {
		res, err := p.addViaRouted(ctx, c, hostNS, contNS)
		if !cniapi.IsUnreachable(err) {
			return res, err
		}
		c.tm.mark("socket")
		c.log.WithError(err).Info("routed is not serving CNI requests on this node; doing the ADD against etcd directly")
	}

	return p.addDirect(ctx, c, hostNS, contNS)
}

// attach creates the veth pair (the container end with mac, when set),
// configures both ends with ips and adds the host routes, registering
// an undo step for each thing it made. It returns the container end's
// MAC.
func attach(c *call, hostNS, contNS ns.NetNS, ips []net.IP, mac net.HardwareAddr, undo *rollback) (net.HardwareAddr, error) {
	mtu := c.conf.EffectiveMTU(c.log.Warnf)
	contMAC, created, err := createVeth(contNS, hostNS, c.args.IfName, c.hostVeth, mtu, mac)
	if created {
		undo.add("delete veth "+c.hostVeth, func() error { return delLink(c.hostVeth) })
	}
	if err != nil {
		return nil, err
	}
	if err := configure(c, contNS, ips, undo); err != nil {
		return nil, err
	}
	return contMAC, nil
}

// configure sets up both ends of an existing pair for ips and adds the
// host routes, registering an undo step for each route.
func configure(c *call, contNS ns.NetNS, ips []net.IP, undo *rollback) error {
	hostLink, err := configureHostSide(c.hostVeth, hasIPv6(ips))
	if err != nil {
		return err
	}
	if err := configureContainerSide(contNS, c.args.IfName, ips); err != nil {
		return err
	}
	for _, ip := range ips {
		rt, err := addHostRoute(hostLink, ip)
		if err != nil {
			return err
		}
		undo.add("delete host route "+rt.Dst.String(), func() error { return delRoute(rt) })
	}
	return nil
}

// podAddresses extracts the assigned addresses, at most one per family
// (one interface holds them, and felix routes one per family).
func podAddresses(r *current.Result, ipamType string) ([]net.IP, error) {
	var ips []net.IP
	seen := map[int]net.IP{}
	for _, ipc := range r.IPs {
		ip := ipc.Address.IP
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		fam := familyOf(ip)
		if prev, dup := seen[fam]; dup {
			return nil, fmt.Errorf("%w: IPAM plugin %s assigned %s and %s; routed-cni gives a pod one address per family: configure one range per family", errConfig, ipamType, prev, ip)
		}
		seen[fam] = ip
		ips = append(ips, ip)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("IPAM plugin %s returned no addresses", ipamType)
	}
	return ips, nil
}

// buildResult describes the attachment for the runtime and for chained
// plugins: interface 0 is the host end, 1 the container end (with its
// sandbox), each address a /32 or /128 on interface 1, with a default
// route per family.
func buildResult(c *call, ipamResult *current.Result, ips []net.IP, contMAC net.HardwareAddr, sandbox string) *current.Result {
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: c.hostVeth, Mac: HostMAC.String()},
			{Name: c.args.IfName, Mac: contMAC.String(), Sandbox: sandbox},
		},
		DNS: ipamResult.DNS,
	}
	for _, ip := range ips {
		res.IPs = append(res.IPs, &current.IPConfig{Interface: current.Int(1), Address: *hostPrefix(ip)})
		gw := GatewayIP
		if ip.To4() == nil {
			gw = GatewayIP6
		}
		res.Routes = append(res.Routes, &types.Route{Dst: *defaultDst(gw), GW: gw})
	}
	if dnsSet(c.conf.DNS) {
		res.DNS = c.conf.DNS
	}
	return res
}

// resultIPs lists a result's addresses for the log.
func resultIPs(r *current.Result) string {
	var s []string
	for _, ipc := range r.IPs {
		s = append(s, ipc.Address.String())
	}
	return strings.Join(s, ",")
}

func dnsSet(d types.DNS) bool {
	return len(d.Nameservers) > 0 || d.Domain != "" || len(d.Search) > 0 || len(d.Options) > 0
}
