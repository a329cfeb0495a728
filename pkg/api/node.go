package api

import (
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/netip"
	"strconv"
)

// Node is a host running routed, and its BGP identity.
type Node struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     NodeSpec   `json:"spec"`
	// Status is what the node reports about itself (written by its
	// routed, never by operators).
	Status NodeStatus `json:"status,omitzero"`
}

// NodeStatus is what a node's routed reports about it: today its
// WireGuard public keys, under Calico's field names.
type NodeStatus struct {
	// WireguardPublicKey is the public key of the node's IPv4 WireGuard
	// device (base64); empty when IPv4 encryption is off on the node.
	WireguardPublicKey string `json:"wireguardPublicKey,omitempty"`
	// WireguardPublicKeyV6 is the same for the IPv6 device.
	WireguardPublicKeyV6 string `json:"wireguardPublicKeyV6,omitempty"`
}

// NodeSpec is the desired state of a Node.
type NodeSpec struct {
	BGP *NodeBGPSpec `json:"bgp,omitempty"`
	// IPv4VXLANTunnelAddr is the address of the node's VXLAN device
	// (its VTEP address), allocated from a VXLAN pool; empty when no
	// VXLAN pool selects the node. Calico's field of the same name.
	IPv4VXLANTunnelAddr string `json:"ipv4VXLANTunnelAddr,omitempty"`
	// VXLANTunnelMACAddr is the MAC of the node's VXLAN device, which
	// other nodes put in their ARP and FDB entries for it.
	VXLANTunnelMACAddr string `json:"vxlanTunnelMACAddr,omitempty"`
	// IPv6VXLANTunnelAddr is the address of the node's IPv6 VXLAN device
	// (its IPv6 VTEP address), allocated from an IPv6 VXLAN pool; empty
	// when none selects the node or the node has no IPv6 address (the
	// IPv6 tunnel runs over it). Calico's field of the same name.
	IPv6VXLANTunnelAddr string `json:"ipv6VXLANTunnelAddr,omitempty"`
	// VXLANTunnelMACAddrV6 is the MAC of the node's IPv6 VXLAN device,
	// which other nodes put in their neighbour and FDB entries for it.
	VXLANTunnelMACAddrV6 string `json:"vxlanTunnelMACAddrV6,omitempty"`
	// Wireguard holds the addresses of the node's WireGuard devices,
	// allocated from the pools while the node publishes a key of the
	// family (Calico's spec.wireguard).
	Wireguard *NodeWireguardSpec `json:"wireguard,omitempty"`
}

// NodeWireguardSpec is the address of each of a node's WireGuard
// devices: its routes to other nodes' pods use it as the source, so
// what its host sends them arrives from an address the receiving node
// routes back through its own device (docs/wireguard.md).
type NodeWireguardSpec struct {
	// InterfaceIPv4Address is the address of the IPv4 device; empty
	// when IPv4 encryption is off on the node or no pool selects it.
	InterfaceIPv4Address string `json:"interfaceIPv4Address,omitempty"`
	// InterfaceIPv6Address is the same for the IPv6 device.
	InterfaceIPv6Address string `json:"interfaceIPv6Address,omitempty"`
}

// VXLANMAC is the MAC of a node's VXLAN device: derived from the node
// name so a recreated device (or a restarted routed) keeps it, locally
// administered and unicast. The node records it in VXLANTunnelMACAddr.
func VXLANMAC(node string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("routed-vxlan/" + node))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = (mac[0] | 0x02) &^ 0x01
	return mac
}

// VXLANMACV6 is the MAC of a node's IPv6 VXLAN device, derived like
// VXLANMAC but distinct from it: the two devices sit on one host.
func VXLANMACV6(node string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("routed-vxlan-v6/" + node))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = (mac[0] | 0x02) &^ 0x01
	return mac
}

// NodeBGPSpec is a node's BGP settings.
type NodeBGPSpec struct {
	// IPv4Address is the node's address with its prefix length
	// (10.0.0.5/24); the prefix decides which peers are cross-subnet.
	IPv4Address string `json:"ipv4Address,omitempty"`
	// IPv6Address is the node's IPv6 address with its prefix length
	// (fd00:10::5/64); empty on nodes without IPv6. BGP peers over IPv6
	// and IPv6 pod routes go to this address.
	IPv6Address             string   `json:"ipv6Address,omitempty"`
	ASNumber                ASNumber `json:"asNumber,omitempty"`
	RouteReflectorClusterID string   `json:"routeReflectorClusterID,omitempty"`
	IPv4IPIPTunnelAddr      string   `json:"ipv4IPIPTunnelAddr,omitempty"`
}

// GetKind implements Resource.
func (n *Node) GetKind() Kind { return KindNode }

// Meta implements Resource.
func (n *Node) Meta() *ObjectMeta { return &n.Metadata }

func (n *Node) setDefaults() {}

// Address returns the node's BGP address with prefix, if it has a valid one.
func (n *Node) Address() (netip.Prefix, bool) {
	if n.Spec.BGP == nil {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(n.Spec.BGP.IPv4Address)
	return p, err == nil
}

// Address6 returns the node's IPv6 BGP address with prefix, if it has a
// valid one.
func (n *Node) Address6() (netip.Prefix, bool) {
	if n.Spec.BGP == nil {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(n.Spec.BGP.IPv6Address)
	return p, err == nil && p.Addr().Is6() && !p.Addr().Is4In6()
}

// Validate implements Resource.
func (n *Node) Validate() error {
	var v errs
	validateName(&v, n.Metadata.Name)
	validateLabels(&v, "metadata.labels", n.Metadata.Labels)
	if b := n.Spec.BGP; b != nil {
		if b.IPv4Address != "" {
			p, err := netip.ParsePrefix(b.IPv4Address)
			if err != nil || !p.Addr().Is4() {
				v.add("spec.bgp.ipv4Address", b.IPv4Address, "must be an IPv4 address with prefix length, e.g. 10.0.0.5/24")
			}
		}
		if b.IPv6Address != "" {
			p, err := netip.ParsePrefix(b.IPv6Address)
			if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || p.Addr().IsLinkLocalUnicast() || p.Addr().Zone() != "" {
				v.add("spec.bgp.ipv6Address", b.IPv6Address, "must be a global or unique-local IPv6 address with prefix length, e.g. fd00:10::5/64")
			}
		}
		validateASN(&v, "spec.bgp.asNumber", b.ASNumber, true)
		if id := b.RouteReflectorClusterID; id != "" {
			if a, err := netip.ParseAddr(id); err != nil || !a.Is4() {
				v.add("spec.bgp.routeReflectorClusterID", id, "must be an IPv4-formatted cluster ID, e.g. 224.0.0.1")
			}
		}
		if t := b.IPv4IPIPTunnelAddr; t != "" {
			if a, err := netip.ParseAddr(t); err != nil || !a.Is4() {
				v.add("spec.bgp.ipv4IPIPTunnelAddr", t, "must be an IPv4 address")
			}
		}
	}
	if t := n.Spec.IPv4VXLANTunnelAddr; t != "" {
		if a, err := netip.ParseAddr(t); err != nil || !a.Is4() {
			v.add("spec.ipv4VXLANTunnelAddr", t, "must be an IPv4 address")
		}
	}
	if t := n.Spec.IPv6VXLANTunnelAddr; t != "" {
		if a, err := netip.ParseAddr(t); err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			v.add("spec.ipv6VXLANTunnelAddr", t, "must be an IPv6 address")
		}
	}
	validateNodeWireguard(&v, n)
	for _, f := range [][2]string{{"spec.vxlanTunnelMACAddr", n.Spec.VXLANTunnelMACAddr}, {"spec.vxlanTunnelMACAddrV6", n.Spec.VXLANTunnelMACAddrV6}} {
		if f[1] == "" {
			continue
		}
		if hw, err := net.ParseMAC(f[1]); err != nil || len(hw) != 6 {
			v.add(f[0], f[1], "must be a MAC address, e.g. 66:da:0e:45:1c:2b")
		}
	}
	return v.result(KindNode, n.Metadata.Name)
}

// validateASN checks a 4-byte AS number; zero means unset when optional.
func validateASN(v *errs, field string, asn ASNumber, optional bool) {
	if asn == 0 && optional {
		return
	}
	if asn == 0 || asn == 23456 || asn == 4294967295 {
		v.add(field, strconv.FormatUint(uint64(asn), 10), "AS number must be between 1 and 4294967294 (and not 23456, AS_TRANS)")
	}
}

// validateNodeWireguard checks the published WireGuard keys and the
// devices' addresses.
func validateNodeWireguard(v *errs, n *Node) {
	if w := n.Spec.Wireguard; w != nil {
		if t := w.InterfaceIPv4Address; t != "" {
			if a, err := netip.ParseAddr(t); err != nil || !a.Is4() {
				v.add("spec.wireguard.interfaceIPv4Address", t, "must be an IPv4 address")
			}
		}
		if t := w.InterfaceIPv6Address; t != "" {
			if a, err := netip.ParseAddr(t); err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
				v.add("spec.wireguard.interfaceIPv6Address", t, "must be an IPv6 address")
			}
		}
	}
	for _, f := range [][2]string{{"status.wireguardPublicKey", n.Status.WireguardPublicKey}, {"status.wireguardPublicKeyV6", n.Status.WireguardPublicKeyV6}} {
		if f[1] == "" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(f[1]); err != nil || len(b) != 32 {
			v.add(f[0], f[1], "must be a WireGuard public key (base64 of 32 bytes)")
		}
	}
}

// WireguardAddress returns the address of the node's WireGuard device
// of the family (IPv6 when v6), if it has a valid one.
func (n *Node) WireguardAddress(v6 bool) (netip.Addr, bool) {
	if n.Spec.Wireguard == nil {
		return netip.Addr{}, false
	}
	s := n.Spec.Wireguard.InterfaceIPv4Address
	if v6 {
		s = n.Spec.Wireguard.InterfaceIPv6Address
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil && a.Is6() == v6 && !a.Is4In6()
}
