// Package felix programs a node's dataplane: routes to local pods, to
// owned and remote blocks, the tunl0 device, sysctls, NAT outgoing and MTU.
package felix

import "net/netip"

// RouteSink is how the BGP speaker hands felix the routes it learned.
// Calls may come from any goroutine; implementations must be safe for
// concurrent use and must not block for long (they only record the
// change and mark the route table dirty).
type RouteSink interface {
	// RouteUpdate adds or replaces the best path for prefix.
	RouteUpdate(prefix netip.Prefix, nextHop netip.Addr)
	// RouteWithdraw removes prefix; unknown prefixes are ignored.
	RouteWithdraw(prefix netip.Prefix)
}

// RouteStatus lets status tools ask whether a learned route is in the
// kernel as felix wants it.
type RouteStatus interface {
	Programmed(prefix netip.Prefix) bool
}
