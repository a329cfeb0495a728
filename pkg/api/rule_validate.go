package api

import (
	"net/netip"
	"strings"
)

// Calico's limits on list sizes.
const (
	maxRules = 1024
	maxNets  = 256
	maxPorts = 50
)

// validateRules checks a list of ingress or egress rules at field.
func validateRules(v *errs, field string, rules []Rule) {
	if len(rules) > maxRules {
		v.add(field, len(rules), "has more than %d rules", maxRules)
	}
	ingress := strings.HasSuffix(field, "ingress")
	for i, r := range rules {
		r.validate(v, indexed(field, i))
		r.validateServices(v, indexed(field, i), ingress)
	}
}

func (r *Rule) validate(v *errs, field string) {
	switch r.Action {
	case ActionAllow, ActionDeny, ActionLog, ActionPass:
	case "":
		v.add(field+".action", nil, "is required: Allow, Deny, Log or Pass")
	default:
		v.add(field+".action", r.Action, "must be Allow, Deny, Log or Pass")
	}
	if r.IPVersion != nil && *r.IPVersion != 4 && *r.IPVersion != 6 {
		v.add(field+".ipVersion", *r.IPVersion, "must be 4 or 6")
	}
	validateProtocol(v, field+".protocol", r.Protocol)
	validateProtocol(v, field+".notProtocol", r.NotProtocol)
	for _, p := range []struct {
		name string
		p    *Protocol
	}{{"protocol", r.Protocol}, {"notProtocol", r.NotProtocol}} {
		if p.p == nil || r.IPVersion == nil {
			continue
		}
		if icmp, v6 := p.p.IsICMP(); icmp && v6 != (*r.IPVersion == 6) {
			v.add(field+"."+p.name, p.p.String(), "does not match ipVersion %d (ICMP goes with 4, ICMPv6 with 6)", *r.IPVersion)
		}
	}
	r.validateICMP(v, field+".icmp", r.ICMP)
	r.validateICMP(v, field+".notICMP", r.NotICMP)

	// Numbered ports need a protocol with ports; named ports may go
	// without one (they carry their protocol), as in Calico.
	var family int // 4 or 6 once nets have shown one
	if r.IPVersion != nil {
		family = *r.IPVersion
	} else if icmp, v6 := protocolOrNil(r.Protocol).IsICMP(); icmp {
		family = 4
		if v6 {
			family = 6
		}
	}
	for _, e := range []struct {
		name string
		e    *EntityRule
	}{{"source", &r.Source}, {"destination", &r.Destination}} {
		ef := field + "." + e.name
		e.e.validate(v, ef)
		for _, ports := range []struct {
			name string
			l    []Port
		}{{"ports", e.e.Ports}, {"notPorts", e.e.NotPorts}} {
			if len(ports.l) == 0 {
				continue
			}
			switch {
			case r.Protocol != nil && !r.Protocol.HasPorts():
				v.add(ef+"."+ports.name, nil, "rules that match ports must set protocol to TCP, UDP or SCTP (protocol is %s)", r.Protocol)
			case r.Protocol == nil && !allNamed(ports.l):
				v.add(ef+"."+ports.name, nil, "rules with a port number or range must set protocol to TCP, UDP or SCTP")
			}
		}
		for _, nets := range []struct {
			name string
			l    []string
		}{{"nets", e.e.Nets}, {"notNets", e.e.NotNets}} {
			for i, n := range nets.l {
				p, err := parseNet(n)
				if err != nil {
					continue // reported by EntityRule.validate
				}
				fam := 4
				if p.Addr().Is6() {
					fam = 6
				}
				nf := indexed(ef+"."+nets.name, i)
				switch {
				case r.IPVersion != nil && fam != *r.IPVersion:
					v.add(nf, n, "is IPv%d but the rule's ipVersion is %d", fam, *r.IPVersion)
				case family != 0 && fam != family:
					v.add(nf, n, "is IPv%d but the rule's protocol or other nets are IPv%d: a rule matches one IP version", fam, family)
				}
				if family == 0 {
					family = fam
				}
				if nets.name == "notNets" && p.Bits() == 0 {
					v.add(nf, n, "excludes every address, so the rule would match nothing")
				}
			}
		}
	}
}

func allNamed(ports []Port) bool {
	for _, p := range ports {
		if p.PortName == "" {
			return false
		}
	}
	return true
}

func validateProtocol(v *errs, field string, p *Protocol) {
	if p == nil {
		return
	}
	if _, ok := p.Num(); !ok {
		if p.Name != "" {
			v.add(field, p.Name, "must be TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite (as written) or a number 1-255")
		} else {
			v.add(field, p.Number, "must be a protocol number 1-255 or a name (TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite)")
		}
	}
}

// validateICMP checks an icmp or notICMP match: it needs the rule's
// protocol to be ICMP or ICMPv6 (an ICMP type means nothing on other
// packets), a type for a code, and numbers in range.
func (r *Rule) validateICMP(v *errs, field string, f *ICMPFields) {
	if f == nil {
		return
	}
	if icmp, _ := protocolOrNil(r.Protocol).IsICMP(); !icmp {
		v.add(field, nil, "needs protocol ICMP or ICMPv6 (protocol is %s)", protocolOrNil(r.Protocol))
	}
	if f.Type != nil && (*f.Type < 0 || *f.Type > 254) {
		v.add(field+".type", *f.Type, "must be 0-254")
	}
	if f.Code != nil {
		if f.Type == nil {
			v.add(field+".code", *f.Code, "needs a type: an ICMP code is matched within its type")
		}
		if *f.Code < 0 || *f.Code > 255 {
			v.add(field+".code", *f.Code, "must be 0-255")
		}
	}
}

// protocolOrNil gives a printable, queryable protocol for a nil pointer
// ("unset", matching no ICMP test).
func protocolOrNil(p *Protocol) Protocol {
	if p == nil {
		return Protocol{Name: "unset"}
	}
	return *p
}

func (e *EntityRule) validate(v *errs, field string) {
	for _, nets := range []struct {
		name string
		l    []string
	}{{"nets", e.Nets}, {"notNets", e.NotNets}} {
		if len(nets.l) > maxNets {
			v.add(field+"."+nets.name, len(nets.l), "has more than %d entries", maxNets)
		}
		for i, n := range nets.l {
			if _, err := parseNet(n); err != nil {
				v.add(indexed(field+"."+nets.name, i), n, "is not a CIDR or IP address")
			}
		}
	}
	validateSelector(v, field+".selector", e.Selector)
	validateSelector(v, field+".notSelector", e.NotSelector)
	if strings.Contains(e.NamespaceSelector, "global(") {
		// Calico's global() limits the selector to GlobalNetworkSets
		// (and host endpoints); felix does not evaluate it, and a rule
		// it cannot evaluate must not be written.
		v.add(field+".namespaceSelector", e.NamespaceSelector, "global() is not supported by routed: match global network sets from a GlobalNetworkPolicy, whose rule selectors see them")
	} else {
		validateSelector(v, field+".namespaceSelector", e.NamespaceSelector)
	}
	e.validateServiceMatch(v, field)
	if sa := e.ServiceAccounts; sa != nil {
		validateSelector(v, field+".serviceAccounts.selector", sa.Selector)
		for i, n := range sa.Names {
			if !nameRE().MatchString(n) {
				v.add(indexed(field+".serviceAccounts.names", i), n, "is not a service account name")
			}
		}
	}
	for _, ports := range []struct {
		name string
		l    []Port
	}{{"ports", e.Ports}, {"notPorts", e.NotPorts}} {
		if len(ports.l) > maxPorts {
			v.add(field+"."+ports.name, len(ports.l), "has more than %d entries", maxPorts)
		}
		for i, p := range ports.l {
			validatePort(v, indexed(field+"."+ports.name, i), p)
		}
	}
}

func validatePort(v *errs, field string, p Port) {
	switch {
	case p.Invalid != "":
		v.add(field, p.Invalid, "must be a port 1-65535, a range \"min:max\" with min <= max, or a port name (letters, digits, '_', '.', '-', not only digits)")
	case p.PortName != "":
		if p.MinPort != 0 || p.MaxPort != 0 || !portNameRE().MatchString(p.PortName) {
			v.add(field, p.PortName, "is not a port name")
		}
	case p.MinPort < 1:
		v.add(field, p.String(), "port numbers must be 1-65535")
	case p.MinPort > p.MaxPort:
		v.add(field, p.String(), "range must go from low to high")
	}
}

// parseNet reads a CIDR, or a bare address as its /32 or /128.
func parseNet(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.ParsePrefix(s)
}
