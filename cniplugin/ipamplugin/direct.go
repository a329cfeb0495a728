//go:build !cnithin

package ipamplugin

import (
	"context"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/cniplugin/netconf"
	"github.com/routed-net/routed/pkg/datastore"
)

// funcs returns one function per CNI verb.
func funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus}
}

// connect opens the etcd connection for verbs that use it (not an ADD
// or DEL that routed serves). Errors are CNI errors.
func (c *call) connect() (*ipamcore.IPAM, error) {
	cfg, err := c.conf.DatastoreConfig()
	if err != nil {
		return nil, netconf.ToCNIError(err)
	}
	ds, err := datastore.New(cfg)
	if err != nil {
		return nil, ipamcore.CNIError(err)
	}
	closeLog := c.closer
	c.closer = func() { _ = ds.Close(); closeLog() }
	return ipamcore.New(ds, c.ic, c.log), nil
}

// addDirect is ADD against etcd, under the host IPAM lock.
func (c *call) addDirect() error {
	m, err := c.connect()
	if err != nil {
		return err
	}
	addrs, err := m.Add(context.Background(), c.conf.Assignment(c.k8s, c.node, c.args.ContainerID))
	if err != nil {
		return c.fail("ADD", err)
	}
	return types.PrintResult(ipamcore.Result(addrs), c.conf.CNIVersion)
}

// delDirect is DEL against etcd, under the host IPAM lock.
func (c *call) delDirect() error {
	m, err := c.connect()
	if err != nil {
		return err
	}
	if _, err := m.Release(context.Background(), c.conf.Name, c.args.ContainerID); err != nil {
		return c.fail("DEL", err)
	}
	return nil
}

// direct runs a verb that only the full build serves, against etcd: it
// begins the call, connects, and hands both to do, whose error it returns
// as is; the connection and the log close when it returns.
func direct(args *skel.CmdArgs, verb string, do func(c *call, m *ipamcore.IPAM) error) error {
	c, err := begin(args, verb)
	if err != nil {
		return err
	}
	defer c.end()
	m, err := c.connect()
	if err != nil {
		return err
	}
	return do(c, m)
}

// cmdCheck verifies that the handle still holds every address of the
// prevResult.
func cmdCheck(args *skel.CmdArgs) error {
	return direct(args, "CHECK", func(c *call, m *ipamcore.IPAM) error {
		prev, err := ipamcore.PrevResult(&c.conf.NetConf)
		if err == nil {
			err = m.Check(context.Background(), c.conf.Name, args.ContainerID, prev)
		}
		if err != nil {
			return c.fail("CHECK", err)
		}
		return nil
	})
}

// cmdGC releases this network's allocations on this node whose container
// is not among the valid attachments (ipamcore.IPAM.GC).
func cmdGC(args *skel.CmdArgs) error {
	return direct(args, "GC", func(c *call, m *ipamcore.IPAM) error {
		if err := m.GC(context.Background(), c.conf.Name, c.node, c.conf.ValidAttachments); err != nil {
			return c.fail("GC", err)
		}
		return nil
	})
}

// cmdStatus succeeds when the datastore answers and some enabled pool
// (among ipv4_pools, if given) selects this node; otherwise code 50.
func cmdStatus(args *skel.CmdArgs) error {
	return direct(args, "STATUS", func(c *call, m *ipamcore.IPAM) error {
		if err := m.Status(context.Background(), c.node, c.conf.EtcdEndpoints); err != nil {
			c.log.WithError(err).Error("STATUS: not ready")
			return ipamcore.NotReady(err)
		}
		return nil
	})
}
