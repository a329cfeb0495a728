package felix

import (
	"encoding/json"
	"fmt"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// hostUnreadable fails closed for a HostEndpoint record felix cannot use
// (it does not decode, or felix refused this node's): its previous
// version goes and, when the record names this node or its node is
// unknown, a host endpoint stands in its place for the interface
// salvaged from it (every interface, "*", when none could be), which
// the deny policy.SetUnreadableHost installs drops all traffic of (the
// failsafe ports, established flows and tunnel peers excepted).
// Left out, the interface it polices would be open, at the latest
// after a restart.
func (l *loop) hostUnreadable(name string, h policy.UnreadableHost, why error) {
	if l.policy == nil {
		return
	}
	l.policyDelete(api.KindHostEndpoint, name)
	local := h.Node == "" || h.Node == l.cfg.NodeName
	lg := l.log.WithError(why).WithField("kind", api.KindHostEndpoint).WithField("name", name)
	if local {
		iface := h.Iface
		if iface == "" {
			iface = api.AllInterfaces
		}
		stand := &api.HostEndpoint{TypeMeta: api.TypeMeta{Kind: api.KindHostEndpoint},
			Metadata: api.ObjectMeta{Name: name, Labels: map[string]string{policy.UnreadableHostLabel: ""}}}
		stand.Spec.Node, stand.Spec.InterfaceName = l.cfg.NodeName, iface
		if err := l.setHostEndpoint(stand); err != nil {
			lg.WithField("reason", err.Error()).Error("a stored HostEndpoint record cannot be used and no host endpoint could stand in its place")
			return
		}
		// Given: a snapshot without the record deletes what stands for it.
		l.policyNames.add(api.KindHostEndpoint, name)
	}
	if err := l.policy.SetUnreadableHost(name, h, local, why); err != nil {
		lg.WithField("reason", err.Error()).Error("a stored HostEndpoint record cannot be used and no deny could stand for it")
		return
	}
	if local {
		lg.WithField("interface", h.Iface).Error("a stored HostEndpoint record of this node (or of no node felix can tell) cannot be used (it does not decode, or felix refused it): its interface's traffic is denied, the failsafe ports excepted, until it is fixed or deleted (routedctl policy unreadable)")
	} else {
		lg.WithField("node", h.Node).Warn("a stored HostEndpoint record of another node cannot be used (it does not decode)")
	}
	l.policyDirty = true
}

// salvageHost reads what it can of where an unreadable HostEndpoint
// record named name applies from its stored bytes: its node and its
// interface, each only when the record's content is named name and the
// field holds a string (the interface: a valid one); otherwise unknown,
// "".
func salvageHost(name string, raw []byte) policy.UnreadableHost {
	var rec struct {
		Metadata struct {
			Name json.RawMessage `json:"name"`
		} `json:"metadata"`
		Spec map[string]json.RawMessage `json:"spec"`
	}
	if json.Unmarshal(raw, &rec) != nil {
		return policy.UnreadableHost{}
	}
	var own string
	if json.Unmarshal(rec.Metadata.Name, &own) != nil || own != name {
		return policy.UnreadableHost{} // names another record, or none
	}
	var h policy.UnreadableHost
	if json.Unmarshal(rec.Spec["node"], &h.Node) != nil {
		h.Node = "" // not a string: unknown (only a name equal to this node's is this node's)
	}
	if json.Unmarshal(rec.Spec["interfaceName"], &h.Iface) != nil || !api.HostInterfaceValid(h.Iface) {
		h.Iface = ""
	}
	return h
}

// hostRefused fails closed for this node's HostEndpoint that felix
// refused (hostUnreadable), reporting whether it did.
func (l *loop) hostRefused(h *api.HostEndpoint, err error) bool {
	if err == nil || h.Spec.Node != l.cfg.NodeName {
		return false
	}
	iface := h.Spec.InterfaceName
	if !api.HostInterfaceValid(iface) {
		iface = ""
	}
	l.hostUnreadable(h.Metadata.Name, policy.UnreadableHost{Node: h.Spec.Node, Iface: iface}, fmt.Errorf("refused: %w", err))
	return true
}
