package policy

import (
	"maps"
	"net/netip"
)

// NetworkSetAt returns the network set whose nets hold addr most
// specifically (the longest prefix; ties by key), for naming a flow's
// end that is no endpoint (felix/flows). ok is false when none holds it.
func (c *Calc) NetworkSetAt(addr netip.Addr) (ns NetworkSet, ok bool) {
	if c.at != nil {
		s, n := c.at.netset(addr)
		if s == nil {
			return NetworkSet{}, false
		}
		return NetworkSet{Key: s.Key, Namespace: s.Namespace, Labels: maps.Clone(s.Labels), Nets: []netip.Prefix{n}}, true
	}
	best := -1
	for _, s := range c.netsets {
		for _, n := range s.Nets {
			if !n.Contains(addr) {
				continue
			}
			if n.Bits() > best || (n.Bits() == best && s.Key < ns.Key) {
				best, ok = n.Bits(), true
				ns = NetworkSet{Key: s.Key, Namespace: s.Namespace, Labels: maps.Clone(s.Labels), Nets: []netip.Prefix{n}}
			}
		}
	}
	return ns, ok
}
