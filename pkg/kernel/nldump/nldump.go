// Package nldump retries netlink dumps the kernel interrupted.
//
// A dump (links, addresses, routes) that a concurrent change interrupts
// (a pod's veth made or removed meanwhile) is flagged by the kernel,
// and vishvananda/netlink returns ErrDumpInterrupted with partial
// results. Acting on a partial dump can leave a device unpoliced or a
// route unseen, so callers retry a bounded number of times and treat
// what still fails as an error.
package nldump

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// Retries is how many times Retry runs a dump before it gives up.
const Retries = 10

// Retry runs f until it returns something other than
// netlink.ErrDumpInterrupted, at most Retries times; the last result
// and error are returned.
func Retry[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range Retries {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}
