package felix

import (
	"fmt"
	"net/netip"
	"strings"
)

// A Node record's tunnel addresses (spec.wireguard's device addresses,
// the VXLAN tunnel addresses) are claims its writer makes; the routed-rr
// identity may write its own Node record and nothing else. Routed
// through the WireGuard device, and put among the node's allowed IPs,
// a claim is a /32 more specific than the real holder's block: it would
// pull the holder's traffic to the claimant and let the claimant send
// from it. So, as the import guard does for learned routes (guard.go),
// a claim counts only where IPAM agrees: the address lies in a block
// affine to the node and is not lent to another node, or IPAM lends it
// to the node (a borrowed /32). For this node's own claim, an address a
// local pod holds is refused too (on the device it would swallow the
// pod's traffic; an old IPAM GC may have freed the tunnel address and
// the CNI handed it out again: docs/wireguard.md).
//
// What the node feed carries (affinities and borrowed addresses) cannot
// tell a node's tunnel allocation from its own pods' addresses on other
// nodes: a node may still name one of its own pods' addresses, which
// IPAM routes to it anyway.

// tunnelAddrCheck answers, for one state, whether IPAM holds an address
// for a node. Built once per plan.
type tunnelAddrCheck struct {
	self string
	// blocks are each node's affine blocks (any state: a node's tunnel
	// address is allocated from its blocks as they are claimed).
	blocks map[string][]netip.Prefix
	// lent maps each borrowed address to the node IPAM lends it to.
	lent map[netip.Addr]string
	// pods maps this node's pods' addresses to their endpoints.
	pods map[netip.Addr]string
}

func newTunnelAddrCheck(self string, s *state) *tunnelAddrCheck {
	c := &tunnelAddrCheck{self: self, blocks: map[string][]netip.Prefix{},
		lent: map[netip.Addr]string{}, pods: map[netip.Addr]string{}}
	for k, a := range s.affinities {
		c.blocks[k.node] = append(c.blocks[k.node], a.CIDR.Masked())
	}
	for _, br := range s.borrowed {
		for a, n := range br {
			c.lent[a] = n
		}
	}
	for name, w := range s.weps {
		for _, n := range w.Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil && p.IsSingleIP() {
				c.pods[p.Addr()] = name
			}
		}
	}
	return c
}

// refusal is why IPAM does not back node's claim of a as its what ("" when
// it does).
func (c *tunnelAddrCheck) refusal(node, what string, a netip.Addr) string {
	if c.self == node {
		if wep := c.pods[a]; wep != "" {
			return fmt.Sprintf("%s %s is pod address of workload endpoint %q", what, a, wep)
		}
	}
	if holder := c.lent[a]; holder != "" {
		if holder == node {
			return ""
		}
		return fmt.Sprintf("%s %s is lent by IPAM to node %q", what, a, holder)
	}
	for _, b := range c.blocks[node] {
		if b.Contains(a) {
			return ""
		}
	}
	return fmt.Sprintf("%s %s is in none of the node's IPAM blocks and not lent to it", what, a)
}

// note records a refusal in refused (keyed by node and address, for
// logging once) and reports whether the claim stands.
func (c *tunnelAddrCheck) note(refused map[string]string, node, what string, a netip.Addr) bool {
	why := c.refusal(node, what, a)
	if why != "" {
		refused[node+" "+a.String()] = why
	}
	return why == ""
}

// refusedNode is the node of a refused key.
func refusedNode(key string) string {
	node, _, _ := strings.Cut(key, " ")
	return node
}
