package felix

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// hostUnreadable fails closed for a HostEndpoint record felix cannot use
// (it does not decode, or felix refused it). Left out, the interface it
// polices would be open, at the latest after a restart. When the record
// names this node, or its node is unknown, its previous version goes and
// a host endpoint stands in its place, where the record salvaged says it
// applies: its interface, else the interfaces holding its expected
// addresses, else every interface ("*"); the deny policy.SetUnreadableHost
// installs drops all its traffic (established flows, the failsafe ports
// and the tunnels' peers excepted), and, for "*", that of every other
// host endpoint of this node too (one sorting first would otherwise
// govern an interface the record may have). A record of another node
// only is listed: its previous version, if any, stays while routed runs
// (its addresses in the sets of the selectors that pick it), as for any
// endpoint whose record cannot be read.
func (l *loop) hostUnreadable(name string, h policy.UnreadableHost, why error) {
	if l.policy == nil {
		return
	}
	local := h.Node == "" || h.Node == l.cfg.NodeName
	lg := l.log.WithError(why).WithField("kind", api.KindHostEndpoint).WithField("name", name)
	// Its previous version goes when it was this node's (or stands in
	// for it): kept, it would go on governing its interface.
	if local || l.hosts.standIn[name] || l.hosts.byIP[name] != nil || l.policy.HostEndpointLocal(name) {
		l.policyDelete(api.KindHostEndpoint, name)
	} else {
		delete(l.undecodable, policy.UnreadableKey(api.KindHostEndpoint, name))
		l.policy.ClearUnreadable(api.KindHostEndpoint, name)
	}
	if local {
		stand := &api.HostEndpoint{TypeMeta: api.TypeMeta{Kind: api.KindHostEndpoint},
			Metadata: api.ObjectMeta{Name: name, Labels: map[string]string{policy.UnreadableHostLabel: ""}}}
		stand.Spec.Node, stand.Spec.InterfaceName = l.cfg.NodeName, h.Iface
		if h.Iface == "" {
			for _, a := range h.IPs {
				stand.Spec.ExpectedIPs = append(stand.Spec.ExpectedIPs, a.String())
			}
			if len(h.IPs) == 0 {
				stand.Spec.InterfaceName = api.AllInterfaces
			}
		}
		if err := l.setHostEndpoint(stand); err != nil {
			lg.WithField("reason", err.Error()).Error("a stored HostEndpoint record cannot be used and no host endpoint could stand in its place")
			return
		}
		if l.hosts.standIn == nil {
			l.hosts.standIn = map[string]bool{}
		}
		l.hosts.standIn[name] = true
		// Given: a snapshot without the record deletes what stands for it.
		l.policyNames.add(api.KindHostEndpoint, name)
	}
	if err := l.policy.SetUnreadableHost(name, h, local, why); err != nil {
		lg.WithField("reason", err.Error()).Error("a stored HostEndpoint record cannot be used and no deny could stand for it")
		return
	}
	if local {
		lg.WithField("interface", h.Iface).WithField("expectedIPs", h.IPs).Error("a stored HostEndpoint record of this node (or of no node felix can tell) cannot be used (it does not decode, or felix refused it): its interface's traffic is denied, the failsafe ports excepted, until it is fixed or deleted (routedctl policy unreadable)")
	} else {
		lg.WithField("node", h.Node).Warn("a stored HostEndpoint record of another node cannot be used (it does not decode, or felix refused it)")
	}
	l.policyDirty = true
}

// salvageHost reads what it can of where an unreadable HostEndpoint
// record named name applies from its stored bytes: its node, its
// interface and its expected addresses, decoded as the record itself is
// (field names matched as encoding/json matches them), each only when
// the record's content is named name and the field holds a valid value;
// otherwise unknown (empty).
func salvageHost(name string, raw []byte) policy.UnreadableHost {
	var rec struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Node          string            `json:"node"`
			InterfaceName json.RawMessage   `json:"interfaceName"`
			ExpectedIPs   []json.RawMessage `json:"expectedIPs"`
		} `json:"spec"`
	}
	// A field of another type is left empty (unknown); the fields
	// after it are still read. Bytes that are not JSON say nothing.
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, &rec); err != nil && !errors.As(err, &typeErr) {
		return policy.UnreadableHost{}
	}
	if rec.Metadata.Name != name {
		return policy.UnreadableHost{} // names another record, or none
	}
	h := policy.UnreadableHost{Node: rec.Spec.Node}
	if len(rec.Spec.InterfaceName) > 0 && string(rec.Spec.InterfaceName) != "null" {
		// Named: there, or, unreadable, anywhere ("*"); the expected
		// addresses find the interface only when none is named.
		if json.Unmarshal(rec.Spec.InterfaceName, &h.Iface) != nil || (h.Iface != "" && !api.HostInterfaceValid(h.Iface)) {
			return policy.UnreadableHost{Node: h.Node}
		}
		if h.Iface != "" {
			return h
		}
	}
	h.IPs = expectedAddrs(rec.Spec.ExpectedIPs)
	return h
}

// expectedAddrs reads a HostEndpoint's expected addresses, or none when
// one of them cannot be read (which interfaces they find is unknown).
func expectedAddrs(raw []json.RawMessage) []netip.Addr {
	var out []netip.Addr
	for _, r := range raw {
		var s string
		a, err := netip.Addr{}, json.Unmarshal(r, &s)
		if err == nil {
			a, err = netip.ParseAddr(s)
		}
		if err != nil || a.Zone() != "" {
			return nil
		}
		out = append(out, a.Unmap())
	}
	return out
}

// hostRefused fails closed for a HostEndpoint that felix refused
// (hostUnreadable), reporting whether it did.
func (l *loop) hostRefused(h *api.HostEndpoint, err error) bool {
	if err == nil {
		return false
	}
	u := policy.UnreadableHost{Node: h.Spec.Node, Iface: h.Spec.InterfaceName}
	switch {
	case u.Iface != "" && !api.HostInterfaceValid(u.Iface):
		u.Iface = "" // named, but no interface: "*"
	case u.Iface == "":
		var raw []json.RawMessage
		for _, s := range h.Spec.ExpectedIPs {
			b, _ := json.Marshal(s)
			raw = append(raw, b)
		}
		u.IPs = expectedAddrs(raw)
	}
	l.hostUnreadable(h.Metadata.Name, u, fmt.Errorf("refused: %w", err))
	return true
}
