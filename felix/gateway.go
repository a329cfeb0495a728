package felix

import (
	"net"
	"net/netip"
)

// gatewayFor asks the kernel how it reaches nh and returns the gateway
// of that route, or the zero Addr when nh is directly reachable or not
// reachable at all (the route is then written as "via nh" and the kernel
// error is reported and retried like any other).
func (l *loop) gatewayFor(nh netip.Addr) netip.Addr {
	routes, err := l.h.RouteGet(net.IP(nh.AsSlice()))
	if err != nil || len(routes) == 0 {
		return netip.Addr{}
	}
	gw, ok := netip.AddrFromSlice(routes[0].Gw.To4())
	if !ok || routes[0].Gw == nil {
		return netip.Addr{}
	}
	return gw
}
