package felix

import (
	"net"
	"net/netip"
)

// gatewayFor asks the kernel how it reaches nh and returns the gateway
// of that route (a link-local IPv6 one zoned with its device), or the
// zero Addr when nh is directly reachable or not reachable at all (the
// route is then written as "via nh" and the kernel error is reported and
// retried like any other).
func (l *loop) gatewayFor(nh netip.Addr) netip.Addr {
	routes, err := l.h.RouteGet(net.IP(nh.AsSlice()))
	if err != nil || len(routes) == 0 {
		return netip.Addr{}
	}
	if routes[0].Gw == nil {
		return netip.Addr{}
	}
	gw, ok := netip.AddrFromSlice(routes[0].Gw)
	if !ok {
		return netip.Addr{}
	}
	gw = gw.Unmap()
	if gw.Is6() && gw.IsLinkLocalUnicast() {
		// Only meaningful with its device: carried as the zone.
		link, err := l.h.LinkByIndex(routes[0].LinkIndex)
		if err != nil {
			return netip.Addr{}
		}
		gw = gw.WithZone(link.Attrs().Name)
	}
	return gw
}
