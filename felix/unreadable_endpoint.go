package felix

import (
	"net/netip"

	"github.com/routed-net/routed/pkg/api"
)

// endpointUnreadable fails closed for a WorkloadEndpoint record that
// does not decode, or whose content names another endpoint: its
// previous version goes, from the policy and from the routes' state
// (it is not what the record says now; a local pod without an endpoint
// has no rules and its interface drops), and a deny stands for it
// (policy.SetUnreadableEndpoint): of the traffic from and to the
// addresses salvaged from it, or, with none, of all traffic. Left out,
// the pod's labels would be no selector's, and a Deny rule picking it
// by them would let it through, at the latest after a restart.
func (l *loop) endpointUnreadable(name string, addrs []netip.Prefix, why error) {
	if l.st.deleteResource(api.KindWorkloadEndpoint, name) {
		l.planDirty = true
	}
	if l.policy == nil {
		return
	}
	l.policyDelete(api.KindWorkloadEndpoint, name)
	lg := l.log.WithError(why).WithField("kind", api.KindWorkloadEndpoint).WithField("name", name)
	if err := l.policy.SetUnreadableEndpoint(name, addrs, why); err != nil {
		lg.WithField("reason", err.Error()).Error("a stored WorkloadEndpoint record cannot be used and no deny could stand for it")
		return
	}
	if len(addrs) == 0 {
		lg.Error("a stored WorkloadEndpoint record cannot be used (it does not decode, or names another endpoint), and its addresses cannot be read: all workload and host endpoint traffic is denied until it is fixed or deleted (routedctl policy unreadable)")
	} else {
		lg.WithField("addresses", addrs).Error("a stored WorkloadEndpoint record cannot be used (it does not decode, or names another endpoint): the traffic from and to its addresses is denied until it is fixed or deleted (routedctl policy unreadable)")
	}
	l.policyDirty = true
}
