package felix

import (
	"net/netip"

	"github.com/routed-net/routed/pkg/api"
)

// endpointUnreadable fails closed for a WorkloadEndpoint record that
// does not decode, names another endpoint, or that felix refused: its
// previous version goes, from the policy and from the routes' state (it
// is not what the record says now; a local pod without an endpoint has
// no rules and its interface drops), and a deny stands for it
// (policy.SetUnreadableEndpoint) of the traffic from and to the
// addresses salvaged from it and those of its previous version. Left
// out, the pod's labels would be no selector's, and a Deny rule picking
// it by them would let it through, at the latest after a restart. It
// returns the addresses denied. Without the policy dataplane nothing
// changes (the routes keep what they had).
func (l *loop) endpointUnreadable(name string, salvaged []netip.Prefix, why error) []netip.Prefix {
	if l.policy == nil {
		return nil
	}
	addrs := append(l.policy.EndpointAddrs(name), salvaged...)
	if l.st.deleteResource(api.KindWorkloadEndpoint, name) {
		l.planDirty = true
	}
	l.policyDelete(api.KindWorkloadEndpoint, name)
	lg := l.log.WithError(why).WithField("kind", api.KindWorkloadEndpoint).WithField("name", name)
	if err := l.policy.SetUnreadableEndpoint(name, addrs, why); err != nil {
		lg.WithField("reason", err.Error()).Error("a stored WorkloadEndpoint record cannot be used and no deny could stand for it")
		return nil
	}
	if len(addrs) == 0 {
		lg.Error("a stored WorkloadEndpoint record cannot be used (it does not decode, names another endpoint, or was refused), and no address of its pod is known: its pod's interface drops on its own node; other nodes deny nothing for it (routedctl policy unreadable)")
	} else {
		lg.WithField("addresses", addrs).Error("a stored WorkloadEndpoint record cannot be used (it does not decode, names another endpoint, or was refused): the traffic from and to its addresses is denied at every pod until it is fixed or deleted (routedctl policy unreadable)")
	}
	l.policyDirty = true
	return addrs
}
