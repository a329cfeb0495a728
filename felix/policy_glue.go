package felix

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// PolicyKinds are the policy model's kinds felix takes from the node
// feed (with every node's WorkloadEndpoints: selectors match remote pods).
var PolicyKinds = []api.Kind{api.KindTier, api.KindNetworkPolicy, api.KindGlobalNetworkPolicy,
	api.KindProfile, api.KindNetworkSet, api.KindGlobalNetworkSet, api.KindServiceEndpoints, api.KindHostEndpoint}

// openPolicy opens the policy dataplane in felix's namespace. Nothing is
// written before the first apply, which happens only once felix has the
// whole datastore: a restarted routed leaves the previous process's
// tables enforcing until it replaces them in one transaction.
func (l *loop) openPolicy() error {
	if l.cfg.Features.DisablePolicy {
		return nil
	}
	m, err := policy.NewManager(policy.Config{
		Dataplane: nftdp.Config{NetnsFd: l.netnsFd(), IfacePrefix: l.cfg.WorkloadInterfacePrefix,
			TunnelIfaces: []string{TunnelDevice, VXLANDevice, VXLANDeviceV6, wireguard.DeviceV4, wireguard.DeviceV6}},
		Log:              l.cfg.PolicyLog,
		FailsafeInbound:  l.cfg.FailsafeInboundHostPorts,
		FailsafeOutbound: l.cfg.FailsafeOutboundHostPorts,
	})
	if err != nil {
		return err
	}
	l.policy = m
	return nil
}

// netnsFd is felix's namespace for nftables (-1: the process's own).
func (l *loop) netnsFd() int {
	if l.nsh.IsOpen() {
		return int(l.nsh)
	}
	return -1
}

// isPolicyKind reports whether k goes to the policy dataplane.
func isPolicyKind(k api.Kind) bool {
	for _, p := range PolicyKinds {
		if p == k {
			return true
		}
	}
	return k == api.KindWorkloadEndpoint
}

// policySet hands one resource to the policy dataplane; an invalid one
// is refused there and logged: a policy refused for its rules denies
// what it selects (fail closed), anything else keeps its previous
// version.
func (l *loop) policySet(r api.Resource) {
	l.noteNodes(r.GetKind())
	if l.policy == nil || !isPolicyKind(r.GetKind()) {
		return
	}
	delete(l.undecodable, policy.UnreadableKey(r.GetKind(), api.StoreName(r)))
	var known []netip.Prefix // an endpoint's last readable version's
	if r.GetKind() == api.KindWorkloadEndpoint {
		known = l.knownAddrs(api.StoreName(r))
	}
	if l.policy.ClearUnreadable(r.GetKind(), api.StoreName(r)) {
		defer l.noteUnreadable()
	}
	var err error
	switch v := r.(type) {
	case *api.Tier:
		l.policy.SetTier(v)
	case *api.NetworkPolicy:
		err = l.policy.SetPolicyFailClosed(v)
	case *api.GlobalNetworkPolicy:
		err = l.policy.SetPolicyFailClosed(v)
	case *api.Profile:
		if labels, had := withoutMarker(v.Spec.LabelsToApply); had {
			// Only what stands for an unreadable HostEndpoint carries it.
			l.log.WithField("name", v.Metadata.Name).Warn("profile: label " + policy.UnreadableHostLabel + " is routed's own; not applied")
			c := *v
			c.Spec.LabelsToApply = labels
			v = &c
		}
		err = l.policy.SetProfile(v)
	case *api.NetworkSet:
		err = l.policy.SetNetworkSet(v)
	case *api.GlobalNetworkSet:
		err = l.policy.SetGlobalNetworkSet(v)
	case *api.ServiceEndpoints:
		err = l.policy.SetServiceEndpoints(v)
	case *api.WorkloadEndpoint:
		err = l.policy.SetWorkloadEndpoint(v, v.Spec.Node == l.cfg.NodeName)
	case *api.HostEndpoint:
		if labels, had := withoutMarker(v.Metadata.Labels); had {
			// Only what stands for an unreadable record carries it.
			l.log.WithField("name", v.Metadata.Name).Warn("host endpoint: label " + policy.UnreadableHostLabel + " is routed's own; ignored")
			c := *v
			c.Metadata.Labels = labels
			v = &c
		}
		if err = l.setHostEndpoint(v); err == nil {
			delete(l.hosts.standIn, v.Metadata.Name) // replaced
		}
	}
	if r.GetKind() != api.KindWorkloadEndpoint {
		l.policyNames.add(r.GetKind(), api.StoreName(r))
	}
	if policy.RefusalFailsClosed(r.GetKind(), err) {
		// Nothing of it would be in force (a previous version is not
		// what the record says now): deny for it as for a record that
		// does not decode.
		l.policyUnreadable(feed.Update{Kind: r.GetKind(), Name: api.StoreName(r), Unreadable: fmt.Errorf("refused: %w", err)})
		// Still given: a snapshot without it deletes it, and its deny.
		l.policyNames.add(r.GetKind(), api.StoreName(r))
		l.noteUnreadable()
		return
	}
	if h, ok := r.(*api.HostEndpoint); ok && l.hostRefused(h, err) {
		l.noteUnreadable()
		return
	}
	if w, ok := r.(*api.WorkloadEndpoint); ok && err != nil {
		// Kept, its previous version would go on as the pod's; left
		// out, its addresses would be no endpoint's: as unreadable.
		l.endpointUnreadable(api.StoreName(w), known, policy.RefusedEndpointAddrs(w), fmt.Errorf("refused: %w", err))
		l.noteUnreadable()
		return
	}
	if err != nil {
		msg := "policy input refused; its previous version (if any) stays in force"
		if _, ok := r.(api.Policy); ok {
			// A policy refused for its rules denies what it selects
			// (the error says so).
			msg = "policy refused"
		}
		l.log.WithError(err).WithField("kind", r.GetKind()).WithField("namespace", r.Meta().Namespace).
			WithField("name", r.Meta().Name).Error(msg)
	}
	l.policyDirty = true
}

// policyDelete removes one resource from the policy dataplane.
func (l *loop) policyDelete(k api.Kind, name string) {
	l.noteNodes(k)
	if l.policy == nil || !isPolicyKind(k) {
		return
	}
	delete(l.undecodable, policy.UnreadableKey(k, name))
	if l.policy.ClearUnreadable(k, name) {
		defer l.noteUnreadable()
	}
	switch k {
	case api.KindTier:
		l.policy.DeleteTier(name)
	case api.KindNetworkPolicy:
		ns, n := api.SplitStoreName(k, name)
		l.policy.DeletePolicy("np:" + ns + "/" + n)
	case api.KindGlobalNetworkPolicy:
		l.policy.DeletePolicy("gnp:" + name)
	case api.KindProfile:
		l.policy.DeleteProfile(name)
	case api.KindNetworkSet:
		ns, n := api.SplitStoreName(k, name)
		l.policy.DeleteNetworkSet(ns, n)
	case api.KindGlobalNetworkSet:
		l.policy.DeleteGlobalNetworkSet(name)
	case api.KindServiceEndpoints:
		l.policy.DeleteServiceEndpoints(api.SplitStoreName(k, name))
	case api.KindWorkloadEndpoint:
		l.policy.DeleteEndpoint(name)
	case api.KindHostEndpoint:
		l.deleteHostEndpoint(name)
	}
	l.policyNames.remove(k, name)
	l.policyDirty = true
}

// policyReplace makes the policy dataplane's input equal to a snapshot's
// (the kinds present in rs, and enc's endpoints, undecoded): what the
// snapshot no longer has goes first (a new endpoint may take the
// interface of one that went), then the rest is set, endpoints last.
// each gets every endpoint decoded from enc before the policy does;
// without a policy dataplane it still gets them (the routes' state
// needs them). bad gets each endpoint of enc that is unreadable, after
// the policy's deny for it is in place (endpointUnreadable).
func (l *loop) policyReplace(rs map[api.Kind][]api.Resource, enc []feed.Encoded, each func(api.Resource), bad func(name string, known, read []netip.Prefix, why error)) {
	if _, ok := rs[api.KindNode]; ok {
		l.noteNodes(api.KindNode)
	}
	if l.policy == nil {
		feed.DecodeEach(enc, each)
		return
	}
	for _, k := range policyReplaceOrder {
		list, ok := rs[k]
		if !ok {
			continue
		}
		var undecoded []feed.Encoded
		if k == api.KindWorkloadEndpoint {
			undecoded = enc
		}
		l.policyDropMissing(k, list, undecoded)
		for _, r := range list {
			l.policySet(r)
		}
		l.policySetEncoded(k, undecoded, each, bad)
	}
	l.noteUnreadable()
	l.policyDirty = true
}

// policyDropMissing removes from the policy dataplane what it was given
// of kind k that a snapshot's list and undecoded objects lack. With
// nothing of k given (a start), it makes no set of the snapshot's names:
// at a big cluster's size that set would hold every endpoint's key
// through the decoding (feed.DecodeEach drops each as it goes).
func (l *loop) policyDropMissing(k api.Kind, list []api.Resource, undecoded []feed.Encoded) {
	given := l.policyGiven(k)
	var unreadable []string
	if k == api.KindWorkloadEndpoint {
		for _, r := range l.policy.Unreadable() {
			if r.Kind == k {
				unreadable = append(unreadable, r.Name)
			}
		}
	}
	if len(given) == 0 && len(unreadable) == 0 {
		return
	}
	keep := make(map[string]bool, len(list)+len(undecoded))
	for _, r := range list {
		keep[api.StoreName(r)] = true
	}
	for _, e := range undecoded {
		keep[e.Name()] = true
	}
	for _, name := range given {
		if !keep[name] {
			l.policyDelete(k, name)
		}
	}
	// Endpoints that were unreadable and are gone: their deny goes (the
	// unreadable ones still here are set after).
	for _, name := range unreadable {
		if !keep[name] {
			l.policyDelete(k, name)
		}
	}
}

// policySetEncoded decodes and sets a snapshot's undecoded objects of
// kind k, each first handed to each. An endpoint that is unreadable (it
// does not decode, or names another object) fails closed
// (endpointUnreadable), then goes to bad; a name whose value gave
// nothing else goes, as in a decoded snapshot, which skips it.
func (l *loop) policySetEncoded(k api.Kind, enc []feed.Encoded, each func(api.Resource), bad func(name string, known, read []netip.Prefix, why error)) {
	if len(enc) == 0 {
		return
	}
	feed.DecodeEachReporting(enc, func(r api.Resource) {
		each(r)
		l.policySet(r)
	}, func(u feed.Update) {
		if u.Kind != api.KindWorkloadEndpoint {
			l.policyDelete(k, u.Name)
			return
		}
		known, read := l.knownAddrs(u.Name), policy.SalvageEndpointAddrs(u.Value)
		l.endpointUnreadable(u.Name, known, read, u.Unreadable)
		if bad != nil {
			bad(u.Name, known, read, u.Unreadable)
		}
	})
	// What is left of enc gave nothing (feed.DecodeEach).
	for _, e := range enc {
		if e.Name() != "" {
			l.policyDelete(k, e.Name())
		}
	}
}

// policyGiven lists the datastore names of what the policy dataplane
// holds of kind k: the endpoints it keeps (there are a big cluster's
// worth, and it has their names already), the names given of the other
// kinds.
func (l *loop) policyGiven(k api.Kind) []string {
	if k == api.KindWorkloadEndpoint {
		return l.policy.Endpoints()
	}
	return slices.Collect(maps.Keys(l.policyNames[k]))
}

// policyReplaceOrder is the order a snapshot's kinds go to the policy
// dataplane: what endpoints' labels and policies' order come from
// first, endpoints last, so that each endpoint group is derived once
// and each new set filled once.
var policyReplaceOrder = []api.Kind{api.KindTier, api.KindProfile, api.KindGlobalNetworkSet, api.KindNetworkSet, api.KindServiceEndpoints,
	api.KindGlobalNetworkPolicy, api.KindNetworkPolicy, api.KindHostEndpoint, api.KindWorkloadEndpoint}

// names are the datastore names of what the policy dataplane was given,
// by kind (to remove what a later snapshot lacks), but endpoints (see
// policyGiven).
type names map[api.Kind]map[string]bool

func (n names) add(k api.Kind, name string) {
	if n[k] == nil {
		n[k] = map[string]bool{}
	}
	n[k][name] = true
}

func (n names) remove(k api.Kind, name string) { delete(n[k], name) }

// applyPolicy writes what changed (full: read the tables back first).
func (l *loop) applyPolicy(ctx context.Context, full bool) error {
	if l.policy != nil && (l.hosts.peersDirty || full) {
		l.syncTunnelPeers()
	}
	if l.policy == nil || (!l.policyDirty && !full) {
		return nil
	}
	var err error
	if full {
		l.refindHostEndpoints()
		err = l.policy.Resync(ctx)
	} else {
		err = l.policy.Apply(ctx)
	}
	if err != nil {
		return errors.Join(errors.New("policy"), err)
	}
	l.policyDirty = false
	return nil
}

// withoutMarker returns labels without policy.UnreadableHostLabel, which
// only a stand-in for an unreadable HostEndpoint may carry, and whether
// labels had it (then the result is a copy; labels is left as is).
func withoutMarker(labels map[string]string) (out map[string]string, had bool) {
	if _, ok := labels[policy.UnreadableHostLabel]; !ok {
		return labels, false
	}
	c := maps.Clone(labels)
	delete(c, policy.UnreadableHostLabel)
	return c, true
}
