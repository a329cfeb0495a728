package plugin

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// Netlink dumps can be interrupted by concurrent changes (other pods being
// wired up at the same time); the kernel then flags the dump and netlink
// returns ErrDumpInterrupted with partial results. These wrappers retry
// a bounded number of times so callers always see a complete dump.

const dumpRetries = 10

func retryDump[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpRetries {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

func linkByName(name string) (netlink.Link, error) {
	return retryDump(func() (netlink.Link, error) { return netlink.LinkByName(name) })
}

func routeListFiltered(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	return retryDump(func() ([]netlink.Route, error) { return netlink.RouteListFiltered(family, filter, mask) })
}
