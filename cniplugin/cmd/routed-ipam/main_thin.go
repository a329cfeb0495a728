//go:build cnithin

// Command routed-ipam, socket-only build (cniplugin/fullbin): it serves
// ADD and DEL when routed answers on the node's CNI socket, and hands
// everything else to routed-ipam-full beside it.
package main

import (
	"github.com/routed-net/routed/cniplugin/fullbin"
	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/cniplugin/ipamplugin"
)

func main() {
	fullbin.Serve(ipamcore.PluginName)
	ipamplugin.Main("routed-ipam: routed's CNI IPAM plugin (addresses from routed IP pools in etcd)")
}
