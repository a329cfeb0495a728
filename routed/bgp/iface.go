package bgp

import (
	"net"
	"net/netip"
	"path"
	"slices"
)

// interfaceSubnets maps each interface glob the filters use to the
// subnets configured on this host's interfaces whose names match it
// (sorted; none when no interface matches). It is read again on every
// pass of the speaker's loop, so the policies follow interfaces that
// come, go or change addresses within a resync interval.
func interfaceSubnets(f map[netip.Addr]PeerFilters) map[string][]string {
	globs := map[string]bool{}
	for _, pf := range f {
		for _, r := range append(slices.Clone(pf.Import), pf.Export...) {
			if r.Interface != "" {
				globs[r.Interface] = true
			}
		}
	}
	if len(globs) == 0 {
		return nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
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
				continue
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
	return out
}
