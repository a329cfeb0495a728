// Package wireguard is felix's WireGuard device: one per address family
// (wg.routed for IPv4, wg-v6.routed for IPv6), each with this node's key
// pair and one peer per other node that published a key.
//
// The Device reconciles like felix's route table: SetDesired records the
// wanted state (key, port, MTU, peers), Apply pushes only the difference
// to the device and re-reads it in full when told to resync or after an
// error. The device is the kernel's WireGuard where the module exists,
// else wireguard-go over a TUN device in this process (never clear text
// instead: a device that cannot be made is an error).
//
// Keys: each family's private key is a root-only (0600) file in the
// state directory, made once and kept across restarts (KeyStore).
package wireguard

import "github.com/sirupsen/logrus"

// Device names, ports and overheads. Calico names its devices
// wireguard.cali and wg-v6.cali; ours end in .routed like vxlan.routed
// (and a name holds at most 15 bytes).
const (
	DeviceV4 = "wg.routed"
	DeviceV6 = "wg-v6.routed"
	PortV4   = 51820
	PortV6   = 51821
	// OverheadV4 is what WireGuard adds to a packet over IPv4: outer
	// IPv4 (20) + UDP (8) + WireGuard header (16) + tag (16), as
	// Calico's MTU -60 rounds it; OverheadV6 the same over IPv6 (-80).
	OverheadV4 = 60
	OverheadV6 = 80
)

// Host encryption (docs/wireguard.md): the devices' own UDP carries
// FirewallMark, and a rule at RulePriority sends every packet without
// that mark to RouteTable, which holds one route per peer host address
// through the device. The encrypted packets (marked) skip the rule and
// leave by the main table, so they never loop into the device.
const (
	// FirewallMark is the mark bit on every packet a device sends
	// (Calico's default WireGuard mark; felix/policy uses 0x200000 and
	// 0x400000, kube-proxy 0x4000 and 0x8000).
	FirewallMark = 0x00100000
	// RouteTable is routed's routing table for host-to-host traffic
	// (`ip route show table 82`), numbered like its route protocol.
	RouteTable = 82
	// RulePriority is the priority of the rule that looks RouteTable
	// up, before the main table's 32766 (Calico's default, 99).
	RulePriority = 99
)

var log = logrus.WithField("component", "wireguard")
