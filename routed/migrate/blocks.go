package migrate

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
)

// calicoBlock is libcalico-go's AllocationBlock as stored: the value of
// an etcd block key, and the spec of an IPAMBlock custom resource (the
// same field names).
type calicoBlock struct {
	CIDR        string  `json:"cidr"`
	Affinity    *string `json:"affinity"`
	Allocations []*int  `json:"allocations"`
	Attributes  []struct {
		HandleID  *string           `json:"handle_id"`
		Secondary map[string]string `json:"secondary"`
	} `json:"attributes"`
	Deleted bool `json:"deleted"`
}

// rawBlock is one stored block and where it was read (for messages).
type rawBlock struct {
	where string
	data  []byte
}

// blockSet is Calico's IPAM converted: the blocks to import and which
// handle holds each allocated address.
type blockSet struct {
	blocks  []ipam.ImportBlock
	handles map[netip.Addr]string
	// attrs says which pod Calico recorded at each address
	// ("<namespace>/<pod>", empty for tunnel addresses).
	pods    map[netip.Addr]string
	skipped []string
}

// convertBlocks converts Calico's blocks: those inside a carried pool,
// affine to a node with a confirmed affinity ("<node> <cidr>" in
// confirmed). Allocations without a handle or of a type routed lacks
// are listed and left free.
func convertBlocks(raw []rawBlock, confirmed map[string]bool, pools []netip.Prefix) blockSet {
	out := blockSet{handles: map[netip.Addr]string{}, pods: map[netip.Addr]string{}}
	for _, x := range raw {
		var cb calicoBlock
		if err := json.Unmarshal(x.data, &cb); err != nil {
			out.skipped = append(out.skipped, fmt.Sprintf("block %s: not JSON: %v", x.where, err))
			continue
		}
		p, err := netip.ParsePrefix(cb.CIDR)
		if err != nil || cb.Deleted {
			out.skipped = append(out.skipped, fmt.Sprintf("block %s: bad cidr %q or marked deleted", x.where, cb.CIDR))
			continue
		}
		node, _ := strings.CutPrefix(deref(cb.Affinity), "host:")
		var allocs []ipam.ImportAllocation
		for o, a := range cb.Allocations {
			if a == nil || *a < 0 || *a >= len(cb.Attributes) {
				continue
			}
			attr := cb.Attributes[*a]
			s := attr.Secondary
			ia := ipam.ImportAllocation{Ordinal: o, Handle: deref(attr.HandleID), Namespace: s["namespace"], Pod: s["pod"], Node: s["node"], Type: ipam.TypePod}
			switch s["type"] {
			case "":
			case "ipipTunnelAddress", "vxlanTunnelAddress", "vxlanV6TunnelAddress", "wireguardTunnelAddress", "wireguardV6TunnelAddress":
				ia.Type = ipam.TypeTunnel
			default:
				out.skipped = append(out.skipped, fmt.Sprintf("block %s: address %s (%s, handle %q): routed has no such allocation type; it will be free in routed", p, addrAt(p, o), s["type"], ia.Handle))
				continue
			}
			if ia.Handle == "" {
				out.skipped = append(out.skipped, fmt.Sprintf("block %s: address %s has no handle; it will be free in routed", p, addrAt(p, o)))
				continue
			}
			allocs = append(allocs, ia)
			out.handles[addrAt(p, o)] = ia.Handle
			if ia.Pod != "" {
				out.pods[addrAt(p, o)] = ia.Namespace + "/" + ia.Pod
			}
		}
		switch {
		case !slices.ContainsFunc(pools, func(pool netip.Prefix) bool { return pool.Bits() <= p.Bits() && pool.Contains(p.Addr()) }):
			out.skipped = append(out.skipped, fmt.Sprintf("block %s (%d addresses in use): not inside a carried IP pool", p, len(allocs)))
		case node == "" || !confirmed[node+" "+p.String()]:
			out.skipped = append(out.skipped, fmt.Sprintf("block %s (%d addresses in use): no confirmed affinity to a node", p, len(allocs)))
		default:
			out.blocks = append(out.blocks, ipam.ImportBlock{CIDR: p, Node: node, Allocations: allocs})
		}
	}
	return out
}

func carriedPools(rs []api.Resource) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range rs {
		if p, ok := r.(*api.IPPool); ok {
			if pre, err := netip.ParsePrefix(p.Spec.CIDR); err == nil {
				out = append(out, pre.Masked())
			}
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// addrAt is the address at offset o (within a block) from p's start, in
// either family.
func addrAt(p netip.Prefix, o int) netip.Addr {
	a := p.Addr()
	for range o {
		a = a.Next()
	}
	return a
}

// ipamConfiguration is routed's IPAMConfiguration "default" with
// Calico's settings; where names the Calico object.
func ipamConfiguration(strict, autoAllocate bool, maxBlocks int, where string) (*api.IPAMConfiguration, error) {
	r := &api.IPAMConfiguration{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPAMConfiguration},
		Metadata: api.ObjectMeta{Name: "default"},
		Spec:     api.IPAMConfigurationSpec{StrictAffinity: strict, MaxBlocksPerHost: maxBlocks, AutoAllocateBlocks: &autoAllocate},
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("migrate: Calico's %s: %w", where, err)
	}
	return r, nil
}
