// Package ipamplugin is routed-ipam, the CNI IPAM plugin over pkg/ipam:
// addresses come from routed's IP pools in etcd, held under the handle
// "<network>.<containerID>", one /32 per attachment. It is a thin CNI
// front end over ipamcore, which routed-cni also runs in-process; the
// executable stays for main plugins other than routed-cni.
package ipamplugin

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/cniplugin/netconf"
	"github.com/routed-net/routed/pkg/cniapi"
)

// DefaultGCGrace is ipamcore.DefaultGCGrace, kept for existing callers.
const DefaultGCGrace = ipamcore.DefaultGCGrace

// IPAMConf is the "ipam" section (ipamcore.IPAMConf).
type IPAMConf = ipamcore.IPAMConf

// Main runs routed-ipam as a CNI executable.
func Main(about string) {
	skel.PluginMainFuncs(funcs(), netconf.Versions, about)
}

// call holds one invocation's parsed input and connections.
type call struct {
	args   *skel.CmdArgs
	conf   *netconf.NetConf
	k8s    netconf.K8sArgs
	node   string
	log    *logrus.Entry
	ic     *ipamcore.IPAMConf
	closer func()
}

// begin parses the input and opens the log. Errors are CNI errors; on
// success the caller must call c.end().
func begin(args *skel.CmdArgs, verb string) (*call, error) {
	conf, err := netconf.ParseNetConf(args.StdinData)
	if err != nil {
		return nil, netconf.ToCNIError(err)
	}
	ic, err := ipamcore.ParseConf(args.StdinData)
	if err != nil {
		return nil, ipamcore.CNIError(err)
	}
	c := &call{args: args, conf: conf}
	var closeLog func()
	c.log, closeLog = netconf.OpenLog(conf, args.ContainerID, "ipam "+verb)
	c.log = c.log.WithField("component", ipamcore.PluginName)
	c.closer = closeLog
	if c.k8s, err = netconf.ParseK8sArgs(args.Args); err != nil {
		c.end()
		return nil, netconf.ToCNIError(err)
	}
	if c.node, err = conf.NodeName(); err != nil {
		c.end()
		return nil, netconf.ToCNIError(err)
	}
	c.ic = ic
	return c, nil
}

// viaRouted runs an ADD or DEL through routed on the node (pkg/cniapi)
// unless routed_socket is "none"; cniapi.ErrUnreachable means routed is
// not serving and the caller does the work itself.
func (c *call) viaRouted(do func(ctx context.Context, cl *cniapi.Client, req *cniapi.Request) error) error {
	if c.conf.RoutedSocket == netconf.SocketOff {
		return cniapi.ErrUnreachable
	}
	req, err := c.conf.RoutedRequest(c.k8s, c.node, c.args.ContainerID, c.args.StdinData)
	if err != nil {
		return err
	}
	sock := c.conf.Socket()
	ctx, cancel := context.WithTimeout(context.Background(), ipamcore.DefaultLockWait+ipamcore.OpTimeout)
	defer cancel()
	err = do(ctx, cniapi.NewClient(sock), req)
	if cniapi.IsUnreachable(err) {
		c.log.WithError(err).Info("routed is not serving CNI requests on this node; using etcd directly")
	}
	return err
}

func (c *call) end() { c.closer() }

// fail logs err and gives it the CNI code an operator and runtime need.
func (c *call) fail(verb string, err error) error {
	cerr := ipamcore.CNIError(err)
	c.log.WithError(err).Errorf("%s failed (CNI code %d)", verb, ipamcore.CodeOf(err))
	return cerr
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := begin(args, "ADD")
	if err != nil {
		return err
	}
	defer c.end()
	var addrs []netip.Addr
	err = c.viaRouted(func(ctx context.Context, cl *cniapi.Client, req *cniapi.Request) error {
		r, err := cl.Add(ctx, req)
		if err == nil {
			addrs = r.IPs
		}
		return err
	})
	if err == nil {
		return types.PrintResult(ipamcore.Result(addrs), c.conf.CNIVersion)
	}
	if !cniapi.IsUnreachable(err) {
		return c.fail("ADD", err)
	}
	return c.addDirect()
}

func cmdDel(args *skel.CmdArgs) error {
	c, err := begin(args, "DEL")
	if err != nil {
		return err
	}
	defer c.end()
	err = c.viaRouted(func(ctx context.Context, cl *cniapi.Client, req *cniapi.Request) error {
		_, err := cl.Del(ctx, req)
		return err
	})
	if err == nil {
		return nil
	}
	if !cniapi.IsUnreachable(err) {
		return c.fail("DEL", err)
	}
	return c.delDirect()
}
