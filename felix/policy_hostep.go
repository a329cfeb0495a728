package felix

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
)

// hostState is felix's host endpoint state: byIP are this node's
// HostEndpoints that name no interface, by name, each policed on every
// interface that holds one of its expected addresses (Calico's), looked
// up when it is given, whenever an address or a host interface of
// felix's namespace changes (hostep_addrs.go) and at every full resync;
// peersDirty says a Node changed, so the nodes' addresses whose tunnel
// packets host endpoints let through are computed again.
type hostState struct {
	byIP map[string]*hostByIP
	// standIn are the names of the endpoints standing for this node's
	// unreadable HostEndpoint records (hostUnreadable).
	standIn map[string]bool
	// watched are the addresses whose changes the address watch passes
	// on (watchAddrs); its goroutine reads them.
	watched atomic.Pointer[map[netip.Addr]bool]
	// again says a lookup that failed has queued another (lookAgainSoon).
	again      atomic.Bool
	peersDirty bool
	// uplinks are the interfaces holding this node's IPv4 and IPv6
	// addresses ("" unknown), whose host endpoints govern WireGuard's
	// devices; uplinkWhy says why one is unknown (both logged on change).
	uplinks, uplinkWhy [2]string
	// hold, set by tests only (hostep_export_test.go), runs on the loop
	// before it looks the addresses up again after a change: a test
	// holds felix back there to prove what the kernel alone polices.
	hold func()
	// encapPorts are the UDP ports dropped from pods as encapsulated
	// (syncEncapPorts).
	encapPorts []uint16
}

// hostDevices are WireGuard's devices, IPv4 then IPv6 (wg4, wg6).
var hostDevices = [2]string{wireguard.DeviceV4, wireguard.DeviceV6}

// noteNodes marks the tunnel peers for recomputing when k is Node.
func (l *loop) noteNodes(k api.Kind) {
	if k == api.KindNode {
		l.hosts.peersDirty = true
	}
}

// syncTunnelPeers gives the policy dataplane every node's address and
// the UDP ports of the tunnels felix runs (their IPIP, VXLAN and, where
// it is on, WireGuard packets pass host endpoint policy), and the
// sources allowed to send this node tunnel packets (syncEncapSources).
func (l *loop) syncTunnelPeers() {
	l.hosts.peersDirty = false
	var addrs []netip.Addr
	for _, n := range l.st.nodes {
		addrs = append(addrs, nodeHostAddrs(n)...)
	}
	ports := []uint16{uint16(l.cfg.vxlanPort())}
	// WireGuard's ports where it is on now (flags, or FelixConfiguration
	// live: SetWireguardOverride marks the peers for recomputing).
	if l.f != nil && l.f.wg != nil {
		if l.f.wg.on[wg4] {
			ports = append(ports, uint16(l.cfg.WireGuard.Port))
		}
		if l.f.wg.on[wg6] {
			ports = append(ports, uint16(l.cfg.WireGuard.PortV6))
		}
	}
	if l.policy.SetHostTunnelPeers(addrs, ports) {
		l.policyDirty = true
	}
	l.syncEncapPorts()
	l.syncEncapSources()
	l.syncHostDevices()
}

// syncHostDevices makes the host endpoint of the interface holding this
// node's address of each family govern that family's WireGuard device
// as well (issue 40): with host encryption, traffic between the nodes'
// host addresses (and the pods' traffic to other hosts) arrives on and
// leaves by the device instead of the uplink, and a HostEndpoint naming
// the uplink would otherwise no longer see it. An uplink not found
// fails closed (nftdp.HostDevice). It runs with the tunnel peers: when
// a Node changes, when this node's address changes in the kernel
// (hostep_addrs.go) and at every full resync.
func (l *loop) syncHostDevices() {
	l.watchAddrs()
	uplinks := make(map[string]string, len(hostDevices))
	for fam, dev := range hostDevices {
		addr, ok := l.st.nodeAddr(l.cfg.NodeName)
		if fam == wg6 {
			addr, ok = l.st.nodeAddr6(l.cfg.NodeName)
		}
		up, why := "", ""
		if !ok {
			why = "this node's address of the family is not known"
		} else if iface, err := l.ifaceHolding(addr.Addr()); err != nil {
			why = err.Error()
		} else {
			up = iface
		}
		uplinks[dev] = up
		l.noteUplink(fam, up, why)
	}
	if l.policy.SetHostDevices(uplinks) {
		l.policyDirty = true
	}
}

// noteUplink logs a change of the interface whose host endpoint governs
// WireGuard's device of family fam: a warning when it is not known
// while WireGuard of that family is on (named host endpoints then drop
// the device's new traffic).
func (l *loop) noteUplink(fam int, up, why string) {
	h := &l.hosts
	if h.uplinks[fam] == up && h.uplinkWhy[fam] == why {
		return
	}
	h.uplinks[fam], h.uplinkWhy[fam] = up, why
	lg := l.log.WithField("device", hostDevices[fam])
	switch {
	case up != "":
		lg.WithField("uplink", up).Info("host endpoints: the WireGuard device is policed by its uplink's host endpoint")
	case l.f != nil && l.f.wg != nil && l.f.wg.on[fam]:
		lg.WithField("reason", why).Warn("host endpoints: no interface holds this node's address, so while a host endpoint names an interface, new traffic through the WireGuard device is dropped (fail closed)")
	}
}

// setHostEndpoint gives the policy dataplane a HostEndpoint; this
// node's endpoint without an interface name gets the interfaces its
// addresses are on.
func (l *loop) setHostEndpoint(h *api.HostEndpoint) error {
	name := h.Metadata.Name
	prev := l.hosts.byIP[name]
	delete(l.hosts.byIP, name)
	if h.Spec.Node != l.cfg.NodeName || h.Spec.InterfaceName != "" {
		if prev != nil {
			l.watchAddrs()
		}
		return l.policy.SetHostEndpoint(h, h.Spec.Node == l.cfg.NodeName)
	}
	e := &hostByIP{h: h}
	if prev != nil {
		e.ifaces, e.why = prev.ifaces, prev.why
	}
	if l.hosts.byIP == nil {
		l.hosts.byIP = map[string]*hostByIP{}
	}
	l.hosts.byIP[name] = e
	l.watchAddrs()
	held, err := l.hostAddrs(addrSet(h.Spec.ExpectedIPs))
	if err != nil {
		// Keep what was found before (nothing, for a new endpoint) and
		// look again in a second (hostAddrs queued it).
		l.log.WithError(err).WithField("name", name).Warn("host endpoint: cannot list this host's addresses; looked up again in a second")
	} else {
		l.noteFound(e, held.holding(h.Spec.ExpectedIPs))
	}
	return l.policy.SetHostEndpoint(h, true, e.ifaces...)
}

// deleteHostEndpoint removes a HostEndpoint from the policy dataplane.
func (l *loop) deleteHostEndpoint(name string) {
	delete(l.hosts.standIn, name)
	delete(l.hosts.byIP, name)
	l.watchAddrs()
	l.policy.DeleteHostEndpoint(name)
}

// refindHostEndpoints looks the interfaces of the endpoints found by
// address up again (one address dump for all of them) and gives the
// policy dataplane those whose interfaces changed.
func (l *loop) refindHostEndpoints() {
	if len(l.hosts.byIP) == 0 {
		return
	}
	wanted := map[netip.Addr]bool{}
	for _, e := range l.hosts.byIP {
		maps.Copy(wanted, addrSet(e.h.Spec.ExpectedIPs))
	}
	held, err := l.hostAddrs(wanted)
	if err != nil {
		l.log.WithError(err).Warn("host endpoints: cannot list this host's addresses; the interfaces found by address stay as they were")
		return
	}
	for _, name := range slices.Sorted(maps.Keys(l.hosts.byIP)) {
		e := l.hosts.byIP[name]
		if !l.noteFound(e, held.holding(e.h.Spec.ExpectedIPs)) {
			continue
		}
		if err := l.policy.SetHostEndpoint(e.h, true, e.ifaces...); err != nil {
			l.log.WithError(err).WithField("name", name).Warn("host endpoint refused")
		}
		l.policyDirty = true
	}
}

// checkFailsafe refuses failsafe ports felix cannot open.
func checkFailsafe(in, out []policy.HostPort) error {
	for field, list := range map[string][]policy.HostPort{"FailsafeInboundHostPorts": in, "FailsafeOutboundHostPorts": out} {
		for i, p := range list {
			if (p.Proto != 6 && p.Proto != 17 && p.Proto != 132) || p.Port == 0 {
				return fmt.Errorf("felix: config: %s[%d] (protocol %d, port %d): must be TCP (6), UDP (17) or SCTP (132) with a port 1-65535", field, i, p.Proto, p.Port)
			}
		}
	}
	return nil
}
