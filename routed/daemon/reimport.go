package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/reimport"
)

// reimportBeforeTrust runs before a held node follows the datastore
// again (identity.Guard.BeforeTrust, off the feed's goroutine, under the
// daemon's context): the pods it runs that the datastore lacks are put
// back first, so felix keeps their routes and IPAM does not give their
// addresses to new pods. It fails, keeping the node held, when one
// cannot be put back; doing tells readiness how many it puts back.
func (n *node) reimportBeforeTrust(ctx context.Context, doing func(string)) error {
	if _, saved := n.journal.Saved(); !n.feed.Synced() && !saved {
		// Held since it started, and no earlier routed saved its view:
		// nothing says which endpoints this node's interfaces are.
		log.Warn("following the datastore again without a re-import: routed has held since it started and " +
			"no saved view of this node's endpoints was found; pods the datastore lacks lose their routes")
		return nil
	}
	rep, err := n.reimport.Apply(ctx, func(rep *reimport.Report) {
		doing(fmt.Sprintf("putting back %d of its %d pods that the datastore lacks and removing %d of its endpoints whose pods are gone",
			len(rep.Missing), rep.Live, len(rep.Stale)))
	})
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

// trustedEndpoints returns this node's endpoints as routed last trusted
// them: felix's once the feed delivered in this process; before that
// (held since it started), the view an earlier routed saved.
func (n *node) trustedEndpoints(ctx context.Context) ([]*api.WorkloadEndpoint, error) {
	if n.feed.Synced() {
		return n.felix.LocalEndpoints(ctx)
	}
	if ws, ok := n.journal.Saved(); ok {
		return ws, nil
	}
	return nil, errors.New("routed has held the datastore since it started and found no saved view of this node's endpoints " +
		"(local-endpoints.json in its state directory): it does not know which pods this node runs")
}

// linkExists reports whether a host interface exists. Only "no such
// link" says no: any other error counts as present, so a failing netlink
// read never makes a live pod look gone.
func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	var nf netlink.LinkNotFoundError
	return err == nil || !errors.As(err, &nf)
}
