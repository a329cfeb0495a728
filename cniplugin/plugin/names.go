package plugin

import (
	"net"
)

// PluginName is the plugin's type and executable name; its full build
// (cniplugin/fullbin) is PluginName plus fullbin.Suffix.
const PluginName = "routed-cni"

// GatewayIP is the link-local next hop every pod routes through; the
// host side answers ARP for it by proxy ARP.
var GatewayIP = net.IPv4(169, 254, 1, 1).To4()

// GatewayIP6 is the IPv6 next hop of every pod: the host side's
// link-local address, derived (EUI-64) from HostMAC as the kernel would,
// and added by routed-cni itself so the host's addr_gen_mode does not
// matter.
var GatewayIP6 = net.ParseIP("fe80::ecee:eeff:feee:eeee")

// HostMAC is the fixed MAC of every host-side veth. Pods only ever talk
// to the gateway, so all host sides can share it and a pod's neighbour
// entry stays valid when its veth is recreated.
var HostMAC = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}

// HandleID is the IPAM handle of one attachment: "<network>.<containerID>".
func HandleID(network, containerID string) string {
	return network + "." + containerID
}
