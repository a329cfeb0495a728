package policy

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

var hostLog = logrus.WithField("component", "policy")

// SetHostEndpoint adds or replaces a HostEndpoint; local tells whether
// it is this node's (then its interfaces are policed). An endpoint that
// names no interface is policed on every interface that holds one of
// its expected addresses, as in Calico: found are those interfaces
// (none while none holds one: then the endpoint's addresses still fill
// sets, but nothing is policed until felix finds them; "" is ignored).
// found is not used when the endpoint names its interface (or "*"):
// Calico never matches such an endpoint by address.
func (m *Manager) SetHostEndpoint(h *api.HostEndpoint, local bool, found ...string) error {
	he, err := HostEndpointFromAPI(h, local, found...)
	if err != nil {
		return err
	}
	m.calc.SetHostEndpoint(he)
	return nil
}

// SetHostTunnelPeers sets the cluster's node addresses, whose IPIP
// packets and UDP packets to udpPorts (their VXLAN and WireGuard ports)
// pass host endpoint policy; it reports whether they changed (then
// Apply writes them).
func (m *Manager) SetHostTunnelPeers(addrs []netip.Addr, udpPorts []uint16) bool {
	return m.calc.SetTunnelPeers(addrs, udpPorts)
}

// SetHostDevices sets the interfaces that carry another's traffic
// (device -> uplink: WireGuard's devices -> the interface holding the
// node's address of their family, "" when none is known) and reports
// whether they changed: the uplink's host endpoint governs the device
// too (nftdp.HostDevice).
func (m *Manager) SetHostDevices(uplinks map[string]string) bool {
	devs := make([]nftdp.HostDevice, 0, len(uplinks))
	for dev, up := range uplinks {
		devs = append(devs, nftdp.HostDevice{Device: dev, Uplink: up})
	}
	return m.dp.SetHostDevices(devs)
}

// HostEndpointLocal reports whether the named HostEndpoint is one of
// this node's (it has chains, or is looked for by its addresses).
func (m *Manager) HostEndpointLocal(name string) bool {
	return m.calc.hosts.eps[HostEndpointKey(name)] != nil
}

// DeleteHostEndpoint removes a HostEndpoint by name.
func (m *Manager) DeleteHostEndpoint(name string) { m.calc.DeleteHostEndpoint(HostEndpointKey(name)) }

// HostEndpoints returns the names of every HostEndpoint given, sorted.
func (m *Manager) HostEndpoints() []string {
	var out []string
	for _, k := range m.calc.Endpoints() {
		if name, ok := strings.CutPrefix(k, hostKeyPrefix); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// HostEndpointFromAPI reads what the calculator needs from a
// HostEndpoint (see SetHostEndpoint for found).
func HostEndpointFromAPI(h *api.HostEndpoint, local bool, found ...string) (HostEndpoint, error) {
	if h.Metadata.Name == "" {
		return HostEndpoint{}, fieldErr("metadata.name", -1, "", "is required")
	}
	he := HostEndpoint{Key: HostEndpointKey(h.Metadata.Name), Iface: h.Spec.InterfaceName, Local: local, Node: h.Spec.Node,
		Labels: h.Metadata.Labels, Profiles: h.Spec.Profiles}
	if he.Iface == "" {
		he.Found = slices.Clone(found)
	}
	for i, p := range h.Spec.Ports {
		n, ok := p.Protocol.Num()
		if !ok || p.Name == "" || p.Port == 0 {
			return HostEndpoint{}, fieldErr("spec.ports", i, p.Name, "needs a name, a protocol and a port 1-65535")
		}
		he.Ports = append(he.Ports, NamedPort{Name: p.Name, Proto: n, Port: p.Port})
	}
	for i, s := range h.Spec.ExpectedIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return HostEndpoint{}, fieldErr("spec.expectedIPs", i, s, "is not an IP address")
		}
		he.IPs = append(he.IPs, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return he, nil
}

// HostEndpointWarnings lists this node's host endpoints that are not
// enforced as written: shadowed by another for the same interface, or
// "*" endpoints that doNotTrack policies select (Calc.HostEndpointWarnings).
func (m *Manager) HostEndpointWarnings() []HostEndpointWarning {
	return m.calc.HostEndpointWarnings()
}

// logHostWarnings logs each host endpoint warning when it appears (a
// warning naming the endpoints, the interface and the policies) and
// when it is gone, once each: Apply runs it after every batch.
func (m *Manager) logHostWarnings() {
	ws := m.calc.HostEndpointWarnings()
	if len(ws) == 0 && len(m.hostWarned) == 0 {
		return
	}
	now := make(map[string]bool, len(ws))
	for _, w := range ws {
		s := w.String()
		now[s] = true
		if m.hostWarned[s] {
			continue
		}
		f := logrus.Fields{"hostEndpoint": w.Endpoint, "node": w.Node, "interface": w.Iface}
		if w.ShadowedBy != "" {
			f["shadowedBy"] = w.ShadowedBy
		} else {
			f["ignoredPolicies"] = strings.Join(w.IgnoredDoNotTrack, ",")
		}
		hostLog.WithFields(f).Warn(s)
	}
	for s := range m.hostWarned {
		if !now[s] {
			hostLog.Info("no longer so: " + s)
		}
	}
	m.hostWarned = now
}
