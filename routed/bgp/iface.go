package bgp

import (
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
)

// interfaceSubnets maps each interface glob the filters use to the
// subnets configured on this host's interfaces whose names match it
// (sorted; none when no interface matches). It is read again on every
// pass of the speaker's loop, so the policies follow interfaces that
// come, go or change addresses within a resync interval. An interface
// list or address list it cannot read is an error: taken as no
// subnet, a rule rejecting routes by interface would be dropped.
func interfaceSubnets(f map[netip.Addr]PeerFilters) (map[string][]string, error) {
	globs := map[string]bool{}
	for _, pf := range f {
		for _, r := range append(slices.Clone(pf.Import), pf.Export...) {
			if r.Interface != "" {
				globs[r.Interface] = true
			}
		}
	}
	if len(globs) == 0 {
		return nil, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("bgp: list the interfaces BGPFilter rules name: %w", err)
	}
	out := map[string][]string{}
	for g := range globs {
		var subnets []string
		for _, ifc := range ifs {
			if ok, _ := path.Match(g, ifc.Name); !ok {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				return nil, fmt.Errorf("bgp: addresses of %s, which a BGPFilter rule names: %w", ifc.Name, err)
			}
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if p, err := netip.ParsePrefix(n.String()); err == nil {
						subnets = append(subnets, p.Masked().String())
					}
				}
			}
		}
		slices.Sort(subnets)
		out[g] = slices.Compact(subnets)
	}
	return out, nil
}
