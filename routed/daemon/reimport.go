package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// reimportBeforeTrust runs before a held node follows the datastore
// again (identity.Guard.BeforeTrust): the pods it runs that the
// datastore lacks are put back first, so felix keeps their routes and
// IPAM does not give their addresses to new pods. It fails, keeping the
// node held, when one cannot be put back.
func (n *node) reimportBeforeTrust(ctx context.Context) error {
	if !n.feed.Synced() {
		// Held since it started: felix never had a trusted view, so
		// this routed does not know which endpoints its interfaces are.
		log.Warn("following the datastore again without a re-import: routed has held since it started and " +
			"does not know this node's pods; pods the datastore lacks lose their routes")
		return nil
	}
	rep, err := n.reimport.Run(ctx, false)
	if err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		e := rep.Failed[0]
		return fmt.Errorf("%d of %d could not be written, e.g. %s (%v): %s", len(rep.Failed), len(rep.Missing)+len(rep.Stale),
			e.Endpoint, e.Addresses, e.Problem)
	}
	return nil
}

// linkExists reports whether a host interface exists. Only "no such
// link" says no: any other error counts as present, so a failing netlink
// read never makes a live pod look gone.
func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	var nf netlink.LinkNotFoundError
	return err == nil || !errors.As(err, &nf)
}
