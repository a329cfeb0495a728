package plugin

import (
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/kernel/nldump"
)

// Netlink dumps can be interrupted by concurrent changes (other pods being
// wired up at the same time): these wrappers retry them (nldump.Retry) so
// callers always see a complete dump.

func linkByName(name string) (netlink.Link, error) {
	return nldump.Retry(func() (netlink.Link, error) { return netlink.LinkByName(name) })
}

func routeListFiltered(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	return nldump.Retry(func() ([]netlink.Route, error) { return netlink.RouteListFiltered(family, filter, mask) })
}
