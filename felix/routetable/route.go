package routetable

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Type is the kind of route.
type Type uint8

// Route types routed programs.
const (
	// Unicast forwards to a device and/or gateway (the zero value).
	Unicast Type = iota
	// Blackhole silently drops; used for a node's own blocks so traffic
	// to unallocated addresses in them does not leak out of the default
	// route.
	Blackhole
)

// rtn is the kernel's RTN_* value for t.
func (t Type) rtn() uint8 {
	if t == Blackhole {
		return unix.RTN_BLACKHOLE
	}
	return unix.RTN_UNICAST
}

// Route is one route felix wants in the main table. Routes are keyed by
// Dst: the table holds at most one wanted route per prefix.
type Route struct {
	Dst  netip.Prefix
	Type Type
	// Iface is the output device by name. Empty with a Gw lets the kernel
	// pick the device that reaches the gateway. A route whose Iface does
	// not exist (or is down) waits until it appears.
	Iface string
	// Gw is the next hop; the zero Addr means a device (scope link) route.
	Gw netip.Addr
	// OnLink tells the kernel the gateway is reachable on Iface even
	// though no address on Iface covers it (IPIP: via <node> dev tunl0).
	OnLink bool
	// Metric is the route's kernel metric (priority); 0 means
	// DefaultMetric for Dst's family. A learned route with a BGPFilter's
	// setPriority has another.
	Metric uint32
	// Src is the preferred source address for traffic this host sends
	// by the route (RTA_PREFSRC); the zero Addr lets the kernel choose.
	Src netip.Addr
}

// metric is the kernel metric r is written at.
func (r Route) metric() uint32 {
	if r.Metric == 0 {
		return DefaultMetric(r.Dst)
	}
	return r.Metric
}

// String renders the route the way `ip route` would.
func (r Route) String() string {
	if r.Type == Blackhole {
		return "blackhole " + r.Dst.String()
	}
	s := r.Dst.String()
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	if r.Iface != "" {
		s += " dev " + r.Iface
	}
	if r.OnLink {
		s += " onlink"
	}
	if !r.Gw.IsValid() {
		s += " scope link"
	}
	if r.metric() != DefaultMetric(r.Dst) {
		s += fmt.Sprintf(" metric %d", r.Metric)
	}
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	return s
}

// scope is the scope the kernel stores for r. IPv6 has no route scopes:
// the kernel reports every IPv6 route as universe.
func (r Route) scope() uint8 {
	if r.Type == Unicast && !r.Gw.IsValid() && r.Dst.Addr().Is4() {
		return unix.RT_SCOPE_LINK
	}
	return unix.RT_SCOPE_UNIVERSE
}

// validate rejects routes the kernel would refuse or felix cannot key.
func (r Route) validate() error {
	switch {
	case !r.Dst.IsValid() || r.Dst.Addr().Is4In6() || r.Dst.Addr().Zone() != "":
		return fmt.Errorf("routetable: route %v: destination must be a plain IPv4 or IPv6 prefix", r)
	case r.Dst != r.Dst.Masked():
		return fmt.Errorf("routetable: route %v: destination has host bits set", r)
	case r.Type != Unicast && r.Type != Blackhole:
		return fmt.Errorf("routetable: route %v: unsupported type %d", r, r.Type)
	case r.Type == Unicast && r.Iface == "" && !r.Gw.IsValid():
		return fmt.Errorf("routetable: route %v: needs a device or a gateway", r)
	case r.Gw.IsValid() && (r.Gw.Is4() != r.Dst.Addr().Is4() || r.Gw.Zone() != ""):
		return fmt.Errorf("routetable: route %v: gateway must be a global address of the destination's family", r)
	case r.OnLink && r.Iface == "":
		return fmt.Errorf("routetable: route %v: onlink needs a device", r)
	case r.Src.IsValid() && (r.Src.Is4() != r.Dst.Addr().Is4() || r.Src.Zone() != "" || r.Type != Unicast):
		return fmt.Errorf("routetable: route %v: source must be an address of the destination's family on a unicast route", r)
	}
	return nil
}

// DefaultMetric is the metric of the routes felix writes for dst's
// family unless a route asks for another: 0 for IPv4; for IPv6 the
// kernel's own default (IP6_RT_PRIO_USER, 1024), which it gives any
// route written without one, so routes the CNI plugin writes without a
// metric are felix's too. felix owns one route per prefix, at whatever
// metric; a second route of its protocol for the same prefix is stale.
func DefaultMetric(dst netip.Prefix) uint32 {
	if dst.Addr().Is4() {
		return 0
	}
	return 1024
}

// KernelRoute is a main-table IPv4 or IPv6 route as the kernel reports
// it, or as felix asks the kernel to write it (then LinkIndex is
// resolved).
type KernelRoute struct {
	Dst       netip.Prefix
	Type      uint8 // RTN_*
	Protocol  uint8
	Scope     uint8
	LinkIndex int
	Gw        netip.Addr
	OnLink    bool
	Priority  uint32
	Tos       uint8
	Src       netip.Addr // preferred source (RTA_PREFSRC), if any
}

// matches reports whether the kernel route k is what r asks for, given
// the ifindex r's device resolved to (0 when r names no device).
func (r Route) matches(k KernelRoute, ifindex int) bool {
	if k.Type != r.Type.rtn() || k.Scope != r.scope() || k.Gw != r.Gw || k.OnLink != r.OnLink || k.Priority != r.metric() || k.Src != r.Src {
		return false
	}
	if r.Type == Blackhole {
		return true
	}
	return r.Iface == "" || k.LinkIndex == ifindex
}
