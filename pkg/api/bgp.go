package api

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DefaultASNumber is used when neither the Node nor BGPConfiguration sets one.
const DefaultASNumber ASNumber = 64512

// BGPConfiguration holds cluster-wide BGP settings ("default") or one
// node's overrides ("node.<name>").
type BGPConfiguration struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta           `json:"metadata"`
	Spec     BGPConfigurationSpec `json:"spec"`
}

// BGPConfigurationSpec is the desired state of a BGPConfiguration.
type BGPConfigurationSpec struct {
	ASNumber ASNumber `json:"asNumber,omitempty"`
	// NodeToNodeMeshEnabled defaults to true; a pointer tells unset from false.
	NodeToNodeMeshEnabled *bool  `json:"nodeToNodeMeshEnabled,omitempty"`
	ListenPort            uint16 `json:"listenPort,omitempty"`
	// KeepaliveTime and HoldTime are Go durations ("30s"); hold must be
	// zero or at least 3 s and at least three keepalives.
	KeepaliveTime     string             `json:"keepaliveTime,omitempty"`
	HoldTime          string             `json:"holdTime,omitempty"`
	ServiceClusterIPs []ServiceClusterIP `json:"serviceClusterIPs,omitempty"`
	// ServiceExternalIPs and ServiceLoadBalancerIPs are further service
	// ranges every node advertises, as Calico does for static CIDRs.
	ServiceExternalIPs     []ServiceClusterIP `json:"serviceExternalIPs,omitempty"`
	ServiceLoadBalancerIPs []ServiceClusterIP `json:"serviceLoadBalancerIPs,omitempty"`
	LogSeverity            string             `json:"logSeverity,omitempty"`
	// Communities names BGP community values; PrefixAdvertisements
	// attaches them (by name or value) to the routes a node originates
	// inside a CIDR, as Calico's fields of the same names.
	Communities          []Community           `json:"communities,omitempty"`
	PrefixAdvertisements []PrefixAdvertisement `json:"prefixAdvertisements,omitempty"`
	// BindMode NodeIP makes BGP listen on the node's address only
	// (Calico's bindMode); None (or empty) listens on every address.
	BindMode string `json:"bindMode,omitempty"`
	// NodeMeshPassword is the TCP MD5 password of node-to-node mesh
	// sessions (Calico's nodeMeshPassword).
	NodeMeshPassword *PasswordSource `json:"nodeMeshPassword,omitempty"`
	// NodeMeshMaxRestartTime is the graceful-restart time of mesh
	// sessions (a Go duration, "120s").
	NodeMeshMaxRestartTime string `json:"nodeMeshMaxRestartTime,omitempty"`
	// LocalWorkloadPeeringIPV4 and LocalWorkloadPeeringIPV6 are the
	// addresses the pods a BGPPeer's localWorkloadSelector matches peer
	// with (Calico's fields): felix puts them, as a /32 and a /128, on
	// the host side of each such pod's interface. Read from "default"
	// only, as Calico's felix does. Calico recommends link-local ones
	// (169.254.0.0/16).
	LocalWorkloadPeeringIPV4 string `json:"localWorkloadPeeringIPV4,omitempty"`
	LocalWorkloadPeeringIPV6 string `json:"localWorkloadPeeringIPV6,omitempty"`
}

// Community is a named BGP community value: "AS:value" (standard) or
// "AS:data1:data2" (large).
type Community struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// PrefixAdvertisement attaches communities (names from Communities, or
// values) to routes inside CIDR.
type PrefixAdvertisement struct {
	CIDR        string   `json:"cidr"`
	Communities []string `json:"communities"`
}

// ParseCommunity checks a community value and says whether it is a
// large community (AS:data1:data2, 32-bit parts) rather than a standard
// one (AS:value, 16-bit parts).
func ParseCommunity(v string) (large bool, err error) {
	parts := strings.Split(v, ":")
	bits := 16
	switch len(parts) {
	case 2:
	case 3:
		bits, large = 32, true
	default:
		return false, fmt.Errorf("community %q: want AS:value or AS:data1:data2", v)
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, bits); err != nil {
			return false, fmt.Errorf("community %q: %q is not a %d-bit number", v, p, bits)
		}
	}
	return large, nil
}

// CommunityValues resolves PrefixAdvertisements' community names.
func (c *BGPConfiguration) CommunityValues(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		v := n
		for _, cm := range c.Spec.Communities {
			if cm.Name == n {
				v = cm.Value
			}
		}
		out = append(out, v)
	}
	return out
}

// ServiceClusterIP is a service CIDR to advertise over BGP.
type ServiceClusterIP struct {
	CIDR string `json:"cidr"`
}

// MeshEnabled reports whether the node-to-node mesh is on (default true).
func (c *BGPConfiguration) MeshEnabled() bool {
	return c.Spec.NodeToNodeMeshEnabled == nil || *c.Spec.NodeToNodeMeshEnabled
}

// GetKind implements Resource.
func (c *BGPConfiguration) GetKind() Kind { return KindBGPConfiguration }

// Meta implements Resource.
func (c *BGPConfiguration) Meta() *ObjectMeta { return &c.Metadata }

func (c *BGPConfiguration) setDefaults() {
	if c.Metadata.Name == "default" {
		if c.Spec.ASNumber == 0 {
			c.Spec.ASNumber = DefaultASNumber
		}
		if c.Spec.NodeToNodeMeshEnabled == nil {
			t := true
			c.Spec.NodeToNodeMeshEnabled = &t
		}
		if c.Spec.ListenPort == 0 {
			c.Spec.ListenPort = 179
		}
	}
}

var logLevels = []string{"", "Trace", "Debug", "Info", "Warning", "Error", "Fatal"}

// Validate implements Resource.
func (c *BGPConfiguration) Validate() error {
	var v errs
	name := c.Metadata.Name
	validateName(&v, name)
	if name != "default" && !strings.HasPrefix(name, "node.") {
		v.add("metadata.name", name, `must be "default" or "node.<nodename>"`)
	}
	validateASN(&v, "spec.asNumber", c.Spec.ASNumber, true)
	validateTimers(&v, c.Spec.KeepaliveTime, c.Spec.HoldTime)
	validatePassword(&v, "spec.nodeMeshPassword", c.Spec.NodeMeshPassword)
	if c.Spec.BindMode != "" && c.Spec.BindMode != "None" && c.Spec.BindMode != "NodeIP" {
		v.add("spec.bindMode", c.Spec.BindMode, "must be None or NodeIP")
	}
	for i, cm := range c.Spec.Communities {
		if _, err := ParseCommunity(cm.Value); cm.Name == "" || err != nil {
			v.add(indexed("spec.communities", i), cm, "needs a name and a value AS:value or AS:data1:data2 (%v)", err)
		}
	}
	for i, pa := range c.Spec.PrefixAdvertisements {
		if !plainCIDR(pa.CIDR) {
			v.add(indexed("spec.prefixAdvertisements", i)+".cidr", pa.CIDR, "is not an IPv4 or IPv6 CIDR (want e.g. 10.65.0.0/16 or fd00:65::/48)")
		}
		for _, val := range c.CommunityValues(pa.Communities) {
			if _, err := ParseCommunity(val); err != nil {
				v.add(indexed("spec.prefixAdvertisements", i)+".communities", val, "is neither a name from spec.communities nor a community value: %v", err)
			}
		}
	}
	validateDuration(&v, "spec.nodeMeshMaxRestartTime", c.Spec.NodeMeshMaxRestartTime)
	validatePeeringIP(&v, "spec.localWorkloadPeeringIPV4", c.Spec.LocalWorkloadPeeringIPV4, false)
	validatePeeringIP(&v, "spec.localWorkloadPeeringIPV6", c.Spec.LocalWorkloadPeeringIPV6, true)
	for field, list := range map[string][]ServiceClusterIP{"spec.serviceClusterIPs": c.Spec.ServiceClusterIPs,
		"spec.serviceExternalIPs": c.Spec.ServiceExternalIPs, "spec.serviceLoadBalancerIPs": c.Spec.ServiceLoadBalancerIPs} {
		for i, s := range list {
			// An empty entry ({}) is skipped, as Calico skips it.
			if s.CIDR != "" && !plainCIDR(s.CIDR) {
				v.add(indexed(field, i)+".cidr", s.CIDR, "is not an IPv4 or IPv6 CIDR (want e.g. 10.96.0.0/12 or fd00:96::/108)")
			}
		}
	}
	ok := false
	for _, l := range logLevels {
		ok = ok || strings.EqualFold(l, c.Spec.LogSeverity)
	}
	if !ok {
		v.add("spec.logSeverity", c.Spec.LogSeverity, "must be one of Trace, Debug, Info, Warning, Error, Fatal")
	}
	return v.result(KindBGPConfiguration, name)
}

// plainCIDR reports whether s is an IPv4 or IPv6 CIDR without a zone
// and not in the IPv4-mapped IPv6 form (which would be advertised as an
// IPv6 route to an IPv4 range).
func plainCIDR(s string) bool {
	p, err := netip.ParsePrefix(s)
	return err == nil && p.Addr().Zone() == "" && !p.Addr().Is4In6()
}

// BGPPeer configures BGP sessions: which routed nodes (Node or
// NodeSelector) peer with whom (PeerIP+ASNumber or PeerSelector).
type BGPPeer struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta  `json:"metadata"`
	Spec     BGPPeerSpec `json:"spec"`
}

// BGPPeerSpec is the desired state of a BGPPeer.
type BGPPeerSpec struct {
	Node                string          `json:"node,omitempty"`
	NodeSelector        string          `json:"nodeSelector,omitempty"`
	PeerIP              string          `json:"peerIP,omitempty"`
	ASNumber            ASNumber        `json:"asNumber,omitempty"`
	PeerSelector        string          `json:"peerSelector,omitempty"`
	Password            *PasswordSource `json:"password,omitempty"`
	SourceAddress       string          `json:"sourceAddress,omitempty"`
	KeepOriginalNextHop bool            `json:"keepOriginalNextHop,omitempty"`
	KeepaliveTime       string          `json:"keepaliveTime,omitempty"`
	HoldTime            string          `json:"holdTime,omitempty"`
	// MaxRestartTime is the graceful-restart time of these sessions.
	MaxRestartTime string `json:"maxRestartTime,omitempty"`
	// NumAllowedLocalASNumbers accepts routes whose AS path already holds
	// the local AS up to this many times.
	NumAllowedLocalASNumbers int32 `json:"numAllowedLocalASNumbers,omitempty"`
	// TTLSecurity enables GTSM (RFC 5082): the peer is at most this many
	// hops away (1-255).
	TTLSecurity uint8 `json:"ttlSecurity,omitempty"`
	// Filters names BGPFilter resources applied to these sessions, in
	// order. A session whose filter does not exist stays down: without
	// it, it would accept routes the filter rejects.
	Filters []string `json:"filters,omitempty"`
	// LocalASNumber is the AS number this node uses on these sessions
	// instead of its own (Calico's localASNumber).
	LocalASNumber ASNumber `json:"localASNumber,omitempty"`
	// NextHopMode is Calico's: Auto (the default: next hop self on
	// eBGP sessions and for the routes this node originates, the
	// original next hop on reflected iBGP routes), Self (this node's
	// address on every route sent, reflected ones included) or Keep (the
	// original next hop on every learned route, as keepOriginalNextHop,
	// on iBGP sessions too). When set, keepOriginalNextHop is ignored.
	NextHopMode string `json:"nextHopMode,omitempty"`
	// ReversePeering Manual makes a peerSelector peering one-way: the
	// selected nodes do not peer back unless a BGPPeer of their own says
	// so (Calico's reversePeering; Auto, the default, peers both ways).
	ReversePeering string `json:"reversePeering,omitempty"`
	// ReachableBy is the gateway the peer is reached through (Calico's
	// reachableBy): every node with a session from this BGPPeer routes
	// the peer's address (/32, /128) through it, so a route the peer
	// itself advertises for a range holding its address cannot take the
	// session away. Needs peerIP, of the same family.
	ReachableBy string `json:"reachableBy,omitempty"`
	// LocalWorkloadSelector makes the nodes this BGPPeer applies to peer
	// with their own pods that it selects (Calico's field): one passive
	// session per matching pod, from the pod's address, with AS
	// asNumber (required); the pod dials the BGPConfiguration's
	// localWorkloadPeeringIPV4/IPV6. Excludes peerIP and peerSelector.
	LocalWorkloadSelector string `json:"localWorkloadSelector,omitempty"`
}

// Calico's nextHopMode values.
const (
	NextHopAuto = "Auto"
	NextHopSelf = "Self"
	NextHopKeep = "Keep"
)

// Calico's reversePeering values.
const (
	ReversePeeringAuto   = "Auto"
	ReversePeeringManual = "Manual"
)

// PeerAddrPort splits peerIP into address and port: Calico writes a
// non-default port as "IP:port" ("[IPv6]:port"); 0 means the default.
func (s BGPPeerSpec) PeerAddrPort() (netip.Addr, uint16, error) {
	if ap, err := netip.ParseAddrPort(s.PeerIP); err == nil {
		return ap.Addr(), ap.Port(), nil
	}
	a, err := netip.ParseAddr(s.PeerIP)
	return a, 0, err
}

// PasswordSource says where a BGP MD5 password comes from. The password
// itself is never stored in the datastore.
type PasswordSource struct {
	File         string        `json:"file,omitempty"`
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// SecretKeyRef names a key in a Kubernetes Secret in routed's namespace.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Source addresses a BGPPeer may ask for.
const (
	SourceUseNodeIP = "UseNodeIP"
	SourceNone      = "None"
)

// GetKind implements Resource.
func (p *BGPPeer) GetKind() Kind { return KindBGPPeer }

// Meta implements Resource.
func (p *BGPPeer) Meta() *ObjectMeta { return &p.Metadata }

func (p *BGPPeer) setDefaults() {
	if p.Spec.SourceAddress == "" {
		p.Spec.SourceAddress = SourceUseNodeIP
	}
}

// Validate implements Resource.
func (p *BGPPeer) Validate() error {
	var v errs
	s := p.Spec
	validateName(&v, p.Metadata.Name)
	if s.Node != "" && s.NodeSelector != "" {
		v.add("spec.nodeSelector", s.NodeSelector, "cannot be set together with spec.node")
	}
	validateSelector(&v, "spec.nodeSelector", s.NodeSelector)
	validateSelector(&v, "spec.peerSelector", s.PeerSelector)
	validateSelector(&v, "spec.localWorkloadSelector", s.LocalWorkloadSelector)
	switch {
	case s.LocalWorkloadSelector != "":
		// As Calico's CRD validation: the pods are the peers.
		if s.PeerIP != "" || s.PeerSelector != "" {
			v.add("spec.localWorkloadSelector", s.LocalWorkloadSelector, "cannot be set together with spec.peerIP or spec.peerSelector")
		}
		if s.ASNumber == 0 {
			v.add("spec.asNumber", nil, "is required when spec.localWorkloadSelector is set (the pods' AS)")
		}
		validateASN(&v, "spec.asNumber", s.ASNumber, true)
		if s.ReachableBy != "" {
			v.add("spec.reachableBy", s.ReachableBy, "cannot be set together with spec.localWorkloadSelector (a pod is reached through its interface)")
		}
	case s.PeerSelector != "" && (s.PeerIP != "" || s.ASNumber != 0):
		v.add("spec.peerSelector", s.PeerSelector, "cannot be set together with spec.peerIP/spec.asNumber")
	case s.PeerSelector == "" && s.PeerIP == "":
		v.add("spec.peerIP", nil, "is required unless spec.peerSelector is set")
	case s.PeerSelector == "":
		// A multicast peerIP is accepted as Calico does (its own test
		// data has some); confd warns that no session can reach it.
		a, _, err := s.PeerAddrPort()
		if err != nil || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() {
			v.add("spec.peerIP", s.PeerIP, "is not an IPv4 or IPv6 address (or IP:port, [IPv6]:port)")
		} else {
			validateReachableBy(&v, s.ReachableBy, a)
		}
		// Without asNumber, peerIP must be a routed node's address (confd).
		validateASN(&v, "spec.asNumber", s.ASNumber, true)
	}
	if s.ReachableBy != "" && s.PeerIP == "" && s.LocalWorkloadSelector == "" {
		v.add("spec.reachableBy", s.ReachableBy, "needs spec.peerIP")
	}
	if s.SourceAddress != SourceUseNodeIP && s.SourceAddress != SourceNone {
		v.add("spec.sourceAddress", s.SourceAddress, "must be UseNodeIP or None")
	}
	validateTimers(&v, s.KeepaliveTime, s.HoldTime)
	validateDuration(&v, "spec.maxRestartTime", s.MaxRestartTime)
	if s.NumAllowedLocalASNumbers < 0 || s.NumAllowedLocalASNumbers > 10 {
		v.add("spec.numAllowedLocalASNumbers", s.NumAllowedLocalASNumbers, "must be between 0 and 10")
	}
	for i, f := range s.Filters {
		if f == "" {
			v.add(indexed("spec.filters", i), f, "must name a BGPFilter")
		}
	}
	validatePassword(&v, "spec.password", s.Password)
	validateASN(&v, "spec.localASNumber", s.LocalASNumber, true)
	if s.NextHopMode != "" && s.NextHopMode != NextHopAuto && s.NextHopMode != NextHopSelf && s.NextHopMode != NextHopKeep {
		v.add("spec.nextHopMode", s.NextHopMode, "must be Auto, Self or Keep")
	}
	if s.ReversePeering != "" && s.ReversePeering != ReversePeeringAuto && s.ReversePeering != ReversePeeringManual {
		v.add("spec.reversePeering", s.ReversePeering, "must be Auto or Manual")
	}
	return v.result(KindBGPPeer, p.Metadata.Name)
}

// validatePeeringIP checks a localWorkloadPeeringIPV4 (v6 false) or
// IPV6 address: a plain unicast address of that family. Felix puts it on
// pod interfaces as a /32 or /128, so a multicast or unspecified one
// could never be dialled.
func validatePeeringIP(v *errs, field, s string, v6 bool) {
	if s == "" {
		return
	}
	a, err := netip.ParseAddr(s)
	fam := "IPv4"
	if v6 {
		fam = "IPv6"
	}
	switch {
	case err != nil || a.Zone() != "" || a.Is4In6() || a.Is6() != v6:
		v.add(field, s, "is not an %s address", fam)
	case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
		v.add(field, s, "must be a unicast %s address a pod can dial (Calico recommends a link-local one)", fam)
	}
}

// validateReachableBy checks a gateway for peer: an address of peer's
// family that a route can go through. A multicast gateway goes with a
// multicast peer only (Calico's test data), which has no session anyway.
func validateReachableBy(v *errs, gw string, peer netip.Addr) {
	if gw == "" {
		return
	}
	a, err := netip.ParseAddr(gw)
	switch {
	case err != nil || a.Zone() != "" || a.Is4In6() || a.IsUnspecified():
		v.add("spec.reachableBy", gw, "is not an IPv4 or IPv6 address")
	case a.Is4() != peer.Is4():
		v.add("spec.reachableBy", gw, "must be of the family of spec.peerIP (%s)", peer)
	case a.IsMulticast() && !peer.IsMulticast():
		v.add("spec.reachableBy", gw, "is a multicast address: no route can go through it")
	case a == peer:
		v.add("spec.reachableBy", gw, "is spec.peerIP itself")
	}
}

// validatePassword checks a password source.
func validatePassword(v *errs, field string, pw *PasswordSource) {
	if pw == nil {
		return
	}
	switch {
	case pw.File != "" && pw.SecretKeyRef != nil:
		v.add(field, nil, "set either file or secretKeyRef, not both")
	case pw.File == "" && pw.SecretKeyRef == nil:
		v.add(field, nil, "needs file or secretKeyRef")
	case pw.SecretKeyRef != nil && (pw.SecretKeyRef.Name == "" || pw.SecretKeyRef.Key == ""):
		v.add(field+".secretKeyRef", nil, "needs both name and key")
	}
}

// validateTimers checks spec.keepaliveTime and spec.holdTime. RFC 4271
// requires a hold time of 0 or at least 3 s (a peer rejects anything else
// in OPEN), and keepalives must come at least three times per hold time.
func validateTimers(v *errs, keepalive, holdTime string) {
	ka := validateDuration(v, "spec.keepaliveTime", keepalive)
	hold := validateDuration(v, "spec.holdTime", holdTime)
	if hold != 0 && hold < 3*time.Second {
		v.add("spec.holdTime", holdTime, "must be 0 or at least 3s")
	}
	if hold != 0 && ka != 0 && ka*3 > hold {
		v.add("spec.keepaliveTime", keepalive, "must be at most a third of holdTime (%s)", holdTime)
	}
}
