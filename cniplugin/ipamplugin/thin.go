//go:build cnithin

package ipamplugin

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/routed-net/routed/cniplugin/fullbin"
	"github.com/routed-net/routed/cniplugin/ipamcore"
)

// The socket-only build (cniplugin/fullbin): ADD and DEL through routed
// are served here; whatever needs etcd is handed to the full build,
// routed-ipam-full, which does exactly what the single binary did.

// funcs returns one function per CNI verb: ADD and DEL, which routed
// serves; CHECK, GC and STATUS are the full build's.
func funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: handOver, GC: handOver, Status: handOver}
}

// handOver replaces this process with the full build.
func handOver(*skel.CmdArgs) error { return ipamcore.CNIError(fullbin.Exec(ipamcore.PluginName)) }

// addDirect hands the ADD to the full build: routed did not take it.
func (c *call) addDirect() error {
	c.log.Debugf("handing the ADD to %s%s", ipamcore.PluginName, fullbin.Suffix)
	return ipamcore.CNIError(fullbin.Exec(ipamcore.PluginName))
}

// delDirect hands the DEL to the full build: routed did not take it.
func (c *call) delDirect() error {
	c.log.Debugf("handing the DEL to %s%s", ipamcore.PluginName, fullbin.Suffix)
	return ipamcore.CNIError(fullbin.Exec(ipamcore.PluginName))
}
