package api

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"
)

// FelixConfiguration is Calico's FelixConfiguration: "default" for the
// cluster, "node.<name>" for one node (its fields override the
// default's, field by field). Only the fields routed honours are its
// own; what routed does with every other Calico field (refused, or
// dropped with a warning saying why) is the table in
// felixconfig_calico.go and docs/felixconfiguration.md.
type FelixConfiguration struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta             `json:"metadata"`
	Spec     FelixConfigurationSpec `json:"spec"`
}

// FelixConfigurationSpec holds the fields of Calico's
// FelixConfigurationSpec that routed honours, under Calico's names.
type FelixConfigurationSpec struct {
	// IPIPMTU is the MTU of tunl0, and of pods while IPIP is in use
	// (0 or unset: the host MTU less 20).
	IPIPMTU *int `json:"ipipMTU,omitempty"`
	// VXLANMTU is the MTU of vxlan.routed, and of pods while IPv4 VXLAN
	// is in use (0 or unset: the host MTU less 50).
	VXLANMTU *int `json:"vxlanMTU,omitempty"`
	// VXLANMTUV6 is the MTU of vxlan-v6.routed, and of pods while IPv6
	// VXLAN is in use (0 or unset: the host MTU less 70).
	VXLANMTUV6 *int `json:"vxlanMTUV6,omitempty"`
	// VXLANPort is the UDP port of the VXLAN devices (unset: 4789, as
	// Calico's). Every node must use the same.
	VXLANPort *int `json:"vxlanPort,omitempty"`
	// VXLANVNI is the VNI of the VXLAN devices (unset: 4096, as
	// Calico's). Every node must use the same.
	VXLANVNI *int `json:"vxlanVNI,omitempty"`
	// RouteRefreshInterval is how often felix re-reads the kernel in
	// full ("90s"; 0 or unset: felix's default, 90 s: routed always
	// re-reads).
	RouteRefreshInterval string `json:"routeRefreshInterval,omitempty"`
	// LogSeverityScreen is routed's log level: Debug, Info, Warning,
	// Error or Fatal.
	LogSeverityScreen string `json:"logSeverityScreen,omitempty"`
	// FailsafeInboundHostPorts are the ports to this node no host
	// endpoint policy closes (unset: Calico's defaults; empty: none).
	FailsafeInboundHostPorts *[]ProtoPort `json:"failsafeInboundHostPorts,omitempty"`
	// FailsafeOutboundHostPorts are the ports from this node no host
	// endpoint policy closes (unset: Calico's defaults; empty: none).
	FailsafeOutboundHostPorts *[]ProtoPort `json:"failsafeOutboundHostPorts,omitempty"`
	// WireguardEnabled and WireguardEnabledV6 turn WireGuard encryption
	// of pod traffic between nodes on or off (unset: routed's
	// --wireguard and --wireguard-v6), live (docs/wireguard.md).
	WireguardEnabled   *bool `json:"wireguardEnabled,omitempty"`
	WireguardEnabledV6 *bool `json:"wireguardEnabledV6,omitempty"`
	// WireguardHostEncryptionEnabled encrypts traffic between the
	// nodes' host addresses too (unset: routed's
	// --wireguard-host-encryption), live (docs/wireguard.md).
	WireguardHostEncryptionEnabled *bool `json:"wireguardHostEncryptionEnabled,omitempty"`
	// ExternalNodesCIDRList are the addresses or CIDRs, besides every
	// node's addresses, that may send the nodes IPIP and VXLAN packets
	// (Calico's externalNodesList): tunnel packets to a node from any
	// other source are dropped before the node unwraps them. A node that
	// sends from an address its Node record does not hold (a second
	// uplink) must be covered here.
	ExternalNodesCIDRList *[]string `json:"externalNodesList,omitempty"`
}

// ProtoPort is a protocol and port, as Calico's failsafe ports are
// written.
type ProtoPort struct {
	// Protocol is TCP (the default), UDP or SCTP.
	Protocol string `json:"protocol,omitempty"`
	Port     uint16 `json:"port"`
	// Net would restrict the port to peers in a CIDR; routed's failsafe
	// ports are open to every peer, so a Net is refused.
	Net string `json:"net,omitempty"`
}

// GetKind implements Resource.
func (c *FelixConfiguration) GetKind() Kind { return KindFelixConfiguration }

// Meta implements Resource.
func (c *FelixConfiguration) Meta() *ObjectMeta { return &c.Metadata }

func (c *FelixConfiguration) setDefaults() {}

// FelixConfigurationNodePrefix starts the name of a node's own
// FelixConfiguration: "node.<name>".
const FelixConfigurationNodePrefix = "node."

// logSeverities are the values of logSeverityScreen (any case).
var logSeverities = []string{"Debug", "Info", "Warning", "Error", "Fatal"}

// Validate implements Resource.
func (c *FelixConfiguration) Validate() error {
	var v errs
	validateMeta(&v, KindFelixConfiguration, &c.Metadata)
	if n := c.Metadata.Name; n != "" && n != "default" && (!strings.HasPrefix(n, FelixConfigurationNodePrefix) || n == FelixConfigurationNodePrefix) {
		v.add("metadata.name", n, `must be "default" (the cluster's) or "node.<node name>": routed reads no other FelixConfiguration, so this one would be stored and never applied`)
	}
	s := &c.Spec
	validateMTU(&v, "spec.ipipMTU", s.IPIPMTU, 68)
	validateMTU(&v, "spec.vxlanMTU", s.VXLANMTU, 68)
	validateMTU(&v, "spec.vxlanMTUV6", s.VXLANMTUV6, 1280)
	if p := s.VXLANPort; p != nil && (*p < 1 || *p > 65535) {
		v.add("spec.vxlanPort", *p, "must be a UDP port, 1-65535")
	}
	if n := s.VXLANVNI; n != nil && (*n < 1 || *n > 1<<24-1) {
		v.add("spec.vxlanVNI", *n, "must be a VXLAN network identifier, 1-16777215")
	}
	if s.RouteRefreshInterval != "" {
		if d := validateDuration(&v, "spec.routeRefreshInterval", s.RouteRefreshInterval); d > 0 && d < time.Second {
			v.add("spec.routeRefreshInterval", s.RouteRefreshInterval, "must be at least 1s (or 0 for the default)")
		}
	}
	if l := s.LogSeverityScreen; l != "" && LogSeverity(l) == "" {
		v.add("spec.logSeverityScreen", l, "must be one of %s", strings.Join(logSeverities, ", "))
	}
	validateProtoPorts(&v, "spec.failsafeInboundHostPorts", s.FailsafeInboundHostPorts)
	validateProtoPorts(&v, "spec.failsafeOutboundHostPorts", s.FailsafeOutboundHostPorts)
	if s.ExternalNodesCIDRList != nil {
		for i, c := range *s.ExternalNodesCIDRList {
			if _, err := parseExternalNode(c); err != nil {
				v.add(fmt.Sprintf("spec.externalNodesList[%d]", i), c, "%v", err)
			}
		}
	}
	return v.result(KindFelixConfiguration, c.Metadata.Name)
}

// LogSeverity returns the canonical spelling of a logSeverityScreen
// value, "" if it is none.
func LogSeverity(s string) string {
	for _, l := range logSeverities {
		if strings.EqualFold(s, l) {
			return l
		}
	}
	return ""
}

func validateMTU(v *errs, field string, mtu *int, least int) {
	if mtu == nil || *mtu == 0 {
		return
	}
	if *mtu < least || *mtu > 65535 {
		v.add(field, *mtu, "must be 0 (derived from the host MTU) or between %d and 65535", least)
	}
}

func validateProtoPorts(v *errs, field string, pps *[]ProtoPort) {
	if pps == nil {
		return
	}
	for i, pp := range *pps {
		f := indexed(field, i)
		if _, err := ProtoPortNumber(pp.Protocol); err != nil {
			v.add(f+".protocol", pp.Protocol, "%v", err)
		}
		if pp.Port == 0 {
			v.add(f+".port", nil, "is required (1-65535)")
		}
		if pp.Net != "" {
			v.add(f+".net", pp.Net, "routed opens failsafe ports to every peer: a port for one network only cannot be honoured, and opening it to all would let any peer reach it")
		}
	}
}

// ProtoPortNumber is the IP protocol number of a failsafe port's
// protocol: TCP (also when empty), UDP or SCTP, in any case.
func ProtoPortNumber(p string) (uint8, error) {
	switch strings.ToUpper(p) {
	case "", "TCP":
		return 6, nil
	case "UDP":
		return 17, nil
	case "SCTP":
		return 132, nil
	}
	return 0, fmt.Errorf("must be TCP, UDP or SCTP")
}

// EffectiveFelixConfiguration merges the cluster's FelixConfiguration
// ("default", may be nil) with a node's ("node.<name>", may be nil):
// each field the node's sets wins. Every field of FelixConfigurationSpec
// is unset at its zero value (a nil pointer, an empty string; an empty
// list given as a pointer is set), so the merge goes field by field
// without naming them: a new field merges the same way.
func EffectiveFelixConfiguration(global, node *FelixConfiguration) FelixConfigurationSpec {
	var out FelixConfigurationSpec
	dst := reflect.ValueOf(&out).Elem()
	for _, c := range []*FelixConfiguration{global, node} {
		if c == nil {
			continue
		}
		src := reflect.ValueOf(c.Spec)
		for i := range src.NumField() {
			if f := src.Field(i); !f.IsZero() {
				dst.Field(i).Set(f)
			}
		}
	}
	return out
}

// ExternalNodeNets parses a FelixConfiguration's externalNodesList (nil:
// none). An entry that is neither a CIDR nor an address is an error
// naming the field and the entry: the list is refused whole, never
// applied without it.
func ExternalNodeNets(list *[]string) ([]netip.Prefix, error) {
	if list == nil {
		return nil, nil
	}
	out := make([]netip.Prefix, 0, len(*list))
	for i, c := range *list {
		p, err := parseExternalNode(c)
		if err != nil {
			return nil, fmt.Errorf("FelixConfiguration spec.externalNodesList[%d] %q: %w", i, c, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ExternalNodeWarnings lists what in a FelixConfiguration's
// externalNodesList admits more than it seems to, each naming the field,
// index and entry: a CIDR with host bits set (10.0.0.5/24 admits the
// whole 10.0.0.0/24; Calico accepts it the same way, so it is warned,
// not refused) and a /0 (0.0.0.0/0, ::/0: every source of that family
// may send the nodes IPIP and VXLAN, the tunnel source check is off;
// legitimate only as an explicit opt-out). Entries that do not parse are
// ExternalNodeNets' errors, not listed here.
func ExternalNodeWarnings(list *[]string) []string {
	if list == nil {
		return nil
	}
	var out []string
	for i, c := range *list {
		p, err := parseExternalNode(c)
		if err != nil {
			continue
		}
		field := fmt.Sprintf("FelixConfiguration spec.externalNodesList[%d] %q", i, c)
		switch {
		case p.Bits() == 0:
			out = append(out, fmt.Sprintf("%s admits every IP%s source: the check of tunnel packets' outer source is off for that family (any host that reaches a node may send it IPIP or VXLAN with any inner source)", field, ipFamily(p)))
		case hostBitsSet(c):
			out = append(out, fmt.Sprintf("%s has host bits set: it admits the whole %s", field, p))
		}
	}
	return out
}

// ipFamily is "v4" or "v6", as in IPv4.
func ipFamily(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "v4"
	}
	return "v6"
}

// hostBitsSet reports whether c is a CIDR with bits set past its length.
func hostBitsSet(c string) bool {
	p, err := netip.ParsePrefix(strings.TrimSpace(c))
	return err == nil && p != p.Masked()
}

// parseExternalNode reads one externalNodesList entry: a CIDR
// (10.0.0.0/24; host bits are cleared, and ExternalNodeWarnings names
// them) or an address (a /32 or /128).
func parseExternalNode(c string) (netip.Prefix, error) {
	c = strings.TrimSpace(c)
	if p, err := netip.ParsePrefix(c); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(c)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, errors.New("must be a CIDR (10.0.0.0/24, fd00::/64) or an IP address")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
