package policy

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/routed-net/routed/pkg/api"
)

// UnreadableHostLabel marks the host endpoint felix puts in place of a
// HostEndpoint record it cannot use (SetUnreadableHost): the deny that
// stands for the record selects it by this label, and only host
// endpoints (a pod's label of that name is not picked).
const UnreadableHostLabel = "routed.internal/unreadable-hostendpoint"

// UnreadableHost is what felix could salvage of an unusable
// HostEndpoint record: where it applies, as far as that is known.
type UnreadableHost struct {
	// Node is the node the record names; "" when it is unknown.
	Node string
	// Iface is the interface it names; "" when it is unknown: then the
	// endpoint felix puts in its place is found by IPs, its expected
	// addresses, or, with none known, is for every interface ("*").
	Iface string
	IPs   []netip.Addr
}

// everywhere reports whether what stands for the record is for every
// interface of this node.
func (h UnreadableHost) everywhere() bool { return h.Iface == "" && len(h.IPs) == 0 }

// SetUnreadableHost fails closed for a HostEndpoint record that is
// stored but does not decode, or that felix refused: left out, the
// interface it polices would be open (after a restart nothing of it is
// in force). When the record names this node, or its node is unknown
// (local), the caller has put a host endpoint in its place, labelled
// UnreadableHostLabel, where the record salvaged says it applies (its
// interface, its expected addresses, else "*"), and this installs, in
// UnreadableTier before every tier, a policy denying all its traffic
// in both directions, to and from the host and forwarded (pods' traffic
// through it too); for "*", of every host endpoint of this node, since
// one sorting first would govern an interface the record may have had.
// The chains keep established flows, the failsafe ports and the
// tunnels' peers first. No other policy picks a stand-in (picks). A
// record of another node is only listed (Unreadable).
func (m *Manager) SetUnreadableHost(name string, h UnreadableHost, local bool, why error) error {
	return m.calc.setUnreadableHost(name, h, local, why)
}

func (c *Calc) setUnreadableHost(name string, h UnreadableHost, local bool, why error) error {
	key := UnreadableKey(api.KindHostEndpoint, name)
	msg := ""
	if why != nil {
		msg = why.Error()
	}
	if c.unreadable == nil {
		c.unreadable = map[string]UnreadableRecord{}
	}
	if !local {
		c.DeletePolicy(key)
		c.unreadable[key] = UnreadableRecord{Kind: api.KindHostEndpoint, Name: name,
			Scope: fmt.Sprintf("nothing on this node (the record names node %q)", h.Node), Error: msg}
		return nil
	}
	deny := []api.Rule{{Action: api.ActionDeny}}
	g := &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "unreadable-hostendpoint"}}
	g.Spec.Selector = "has(" + UnreadableHostLabel + ")"
	if h.everywhere() {
		g.Spec.Selector = "all()"
	}
	g.Spec.Types = []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
	g.Spec.Ingress, g.Spec.Egress = deny, deny
	g.Spec.ApplyOnForward = true
	np, err := compilePolicy(g)
	if err != nil {
		return fmt.Errorf("policy: the deny for unreadable HostEndpoint %q: %w", name, err)
	}
	np.hostsOnly = true
	np.key = key
	np.tier, np.order, np.name = UnreadableTier, math.Inf(-1), key
	c.replacePolicy(key, np)
	iface := h.Iface
	switch {
	case iface != "":
	case len(h.IPs) > 0:
		iface = fmt.Sprintf("the interfaces holding %v", h.IPs)
	default:
		iface = "every interface (\"*\"; every host endpoint of this node)"
	}
	c.unreadable[key] = UnreadableRecord{Kind: api.KindHostEndpoint, Name: name,
		Scope: "this node's host traffic on " + iface, Error: msg}
	return nil
}
