//go:build !cnithin

// Command routed-ipam is routed's CNI IPAM plugin: routed-cni (or any
// main plugin) delegates address assignment to it.
package main

import "github.com/routed-net/routed/cniplugin/ipamplugin"

func main() {
	ipamplugin.Main("routed-ipam: routed's CNI IPAM plugin (addresses from routed IP pools in etcd)")
}
