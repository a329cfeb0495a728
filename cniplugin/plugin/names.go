package plugin

import (
	"crypto/sha1"
	"encoding/hex"
	"net"
)

// RouteProtocol (82) marks every host route the CNI plugin programs, so that
// only routes carrying it are ever deleted or replaced. It must equal
// felix.RouteProtocol: felix reconciles the same workload routes. The
// plugin does not import felix to keep the binary small.
const RouteProtocol = 82

// HostVethPrefix starts every host-side veth name; felix matches
// workload interfaces by it.
const HostVethPrefix = "cali"

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

// HostVethName is "cali" + the first 11 hex digits of
// sha1("<namespace>.<pod>"), or of sha1(containerID) for non-Kubernetes
// workloads: 15 characters, the kernel's limit, and the same name Calico
// computes so its tooling recognises the interfaces.
func HostVethName(namespace, pod, containerID string) string {
	key := containerID
	if pod != "" {
		key = namespace + "." + pod
	}
	sum := sha1.Sum([]byte(key))
	return HostVethPrefix + hex.EncodeToString(sum[:])[:11]
}

// HandleID is the IPAM handle of one attachment: "<network>.<containerID>".
func HandleID(network, containerID string) string {
	return network + "." + containerID
}
