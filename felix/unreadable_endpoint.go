package felix

import (
	"net/netip"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// endpointUnreadable fails closed for a WorkloadEndpoint record that
// does not decode, names another endpoint, or that felix refused: its
// previous version goes, from the policy and from the routes' state (it
// is not what the record says now; a local pod without an endpoint has
// no rules and its interface drops), and a deny stands for it
// (policy.SetUnreadableEndpoint) of the traffic from and to known (the
// addresses of its last readable version: knownAddrs, taken before
// anything cleared them) and read (those read from the record). Left
// out, the pod's labels would be no selector's, and a Deny rule picking
// it by them would let it through, at the latest after a restart.
// Without the policy dataplane nothing changes (the routes keep what
// they had).
func (l *loop) endpointUnreadable(name string, known, read []netip.Prefix, why error) {
	if l.policy == nil {
		return
	}
	if l.st.deleteResource(api.KindWorkloadEndpoint, name) {
		l.planDirty = true
	}
	l.policyDelete(api.KindWorkloadEndpoint, name)
	lg := l.log.WithError(why).WithField("kind", api.KindWorkloadEndpoint).WithField("name", name)
	if err := l.policy.SetUnreadableEndpoint(name, known, read, why); err != nil {
		lg.WithField("reason", err.Error()).Error("a stored WorkloadEndpoint record cannot be used and no deny could stand for it")
		return
	}
	if addrs := policy.DeniableAddrs(known, read); len(addrs) == 0 {
		lg.Error("a stored WorkloadEndpoint record cannot be used (it does not decode, names another endpoint, or was refused), and no single address of its pod is known: its pod's interface drops on its own node; other nodes deny nothing for it (routedctl policy unreadable)")
	} else {
		lg.WithField("addresses", addrs).Error("a stored WorkloadEndpoint record cannot be used (it does not decode, names another endpoint, or was refused): the traffic from and to its addresses is denied at every pod until it is fixed or deleted (routedctl policy unreadable)")
	}
	l.policyDirty = true
}

// knownAddrs are the addresses of the last readable version of the
// workload endpoint name (policy.Manager.EndpointAddrs).
func (l *loop) knownAddrs(name string) []netip.Prefix {
	if l.policy == nil {
		return nil
	}
	return l.policy.EndpointAddrs(name)
}
