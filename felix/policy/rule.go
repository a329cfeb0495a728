package policy

import (
	"fmt"
	"net/netip"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// rule is a compiled api.Rule.
type rule struct {
	action          api.Action
	ipVersion       uint8
	proto, notProto uint8
	icmp, notICMP   *nftdp.ICMPMatch
	src, dst        side
}

// side is a compiled EntityRule.
type side struct {
	nets, notNets   []netip.Prefix
	sel, notSel     *matcher // nil: no selector match
	ports, notPorts []nftdp.PortRange
	named, notNamed []string // named ports
	portMatcher     *matcher // whose named ports: sel, or every endpoint
}

// setSpec is one nftables set a rule needs: the addresses a matcher
// picks, or their named port (protocol 0: any).
type setSpec struct {
	name  string
	kind  nftdp.SetKind
	m     *matcher
	proto uint8
	port  string
}

func addrSet(m *matcher) setSpec {
	return setSpec{name: hashName("s-", m.id), kind: nftdp.AddrSet, m: m}
}

func namedPortSet(m *matcher, proto uint8, port string) setSpec {
	return setSpec{name: hashName("n-", fmt.Sprintf("%s;proto=%d;port=%s", m.id, proto, port)), kind: nftdp.NamedPortSet, m: m, proto: proto, port: port}
}

// compileRule checks and compiles one rule; field is its path
// ("spec.ingress[2]") for errors, policyNS the namespace of a
// NetworkPolicy.
func compileRule(field string, r *api.Rule, policyNS string) (*rule, error) {
	out := &rule{action: r.Action}
	switch r.Action {
	case api.ActionAllow, api.ActionDeny, api.ActionLog, api.ActionPass:
	default:
		return nil, fieldErr(field+".action", -1, r.Action, "must be Allow, Deny, Log or Pass")
	}
	if v := r.IPVersion; v != nil {
		if *v != 4 && *v != 6 {
			return nil, fieldErr(field+".ipVersion", -1, *v, "must be 4 or 6")
		}
		out.ipVersion = uint8(*v)
	}
	for _, x := range []struct {
		name string
		p    *api.Protocol
		to   *uint8
	}{{"protocol", r.Protocol, &out.proto}, {"notProtocol", r.NotProtocol, &out.notProto}} {
		if x.p == nil {
			continue
		}
		n, ok := x.p.Num()
		if !ok {
			return nil, fieldErr(field+"."+x.name, -1, x.p, "must be TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number 1-255")
		}
		*x.to = n
	}
	var err error
	if out.icmp, err = compileICMP(field+".icmp", r.ICMP); err != nil {
		return nil, err
	}
	if out.notICMP, err = compileICMP(field+".notICMP", r.NotICMP); err != nil {
		return nil, err
	}
	if (out.icmp != nil || out.notICMP != nil) && out.proto != 1 && out.proto != 58 {
		return nil, fieldErr(field+".protocol", -1, r.Protocol, "must be ICMP or ICMPv6 when icmp or notICMP is given")
	}
	if out.src, err = compileSide(field+".source", &r.Source, policyNS, out.proto); err != nil {
		return nil, err
	}
	if out.dst, err = compileSide(field+".destination", &r.Destination, policyNS, out.proto); err != nil {
		return nil, err
	}
	if err = compileServices(field+".source", &r.Source, &out.src, false, policyNS); err != nil {
		return nil, err
	}
	if err = compileServices(field+".destination", &r.Destination, &out.dst, true, policyNS); err != nil {
		return nil, err
	}
	return out, nil
}

func compileICMP(field string, f *api.ICMPFields) (*nftdp.ICMPMatch, error) {
	if f == nil || f.Type == nil {
		if f != nil && f.Code != nil {
			return nil, fieldErr(field+".code", -1, *f.Code, "needs a type")
		}
		return nil, nil
	}
	if *f.Type < 0 || *f.Type > 254 {
		return nil, fieldErr(field+".type", -1, *f.Type, "must be 0-254")
	}
	m := &nftdp.ICMPMatch{Type: uint8(*f.Type), Code: -1}
	if f.Code != nil {
		if *f.Code < 0 || *f.Code > 255 {
			return nil, fieldErr(field+".code", -1, *f.Code, "must be 0-255")
		}
		m.Code = *f.Code
	}
	return m, nil
}

func compileSide(field string, e *api.EntityRule, policyNS string, proto uint8) (side, error) {
	var s side
	for _, x := range []struct {
		name string
		in   []string
		out  *[]netip.Prefix
	}{{"nets", e.Nets, &s.nets}, {"notNets", e.NotNets, &s.notNets}} {
		for i, n := range x.in {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				a, err2 := netip.ParseAddr(n)
				if err2 != nil {
					return s, fieldErr(field+"."+x.name, i, n, "is not a CIDR or address")
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			*x.out = append(*x.out, p.Masked())
		}
	}
	var saNames []string
	saSel := ""
	if e.ServiceAccounts != nil {
		saNames, saSel = e.ServiceAccounts.Names, e.ServiceAccounts.Selector
	}
	var err error
	if e.Selector != "" || e.NamespaceSelector != "" || e.ServiceAccounts != nil {
		if s.sel, err = newMatcher(field, e.Selector, e.NamespaceSelector, policyNS, saNames, saSel); err != nil {
			return s, err
		}
	}
	if e.NotSelector != "" {
		if s.notSel, err = newMatcher(field+".notSelector", e.NotSelector, e.NamespaceSelector, policyNS, nil, ""); err != nil {
			return s, err
		}
		// In a NetworkPolicy a notSelector alone still means the
		// policy's namespace, as in Calico (whose rule gets the positive
		// selector projectcalico.org/namespace == '<ns>' whenever
		// selector, notSelector or namespaceSelector is set): "not app
		// a" is every other endpoint of the namespace, never an address
		// outside it.
		if s.sel == nil && policyNS != "" {
			if s.sel, err = newMatcher(field, "", "", policyNS, nil, ""); err != nil {
				return s, err
			}
		}
	}
	for _, x := range []struct {
		name  string
		in    []api.Port
		nums  *[]nftdp.PortRange
		names *[]string
	}{{"ports", e.Ports, &s.ports, &s.named}, {"notPorts", e.NotPorts, &s.notPorts, &s.notNamed}} {
		for i, p := range x.in {
			switch {
			case p.Invalid != "":
				return s, fieldErr(field+"."+x.name, i, p.Invalid, "must be a port, a range lo:hi or a port name")
			case p.PortName != "" && (proto == 0 || portProto(proto)):
				// Without a protocol a named port is matched on the
				// protocol each endpoint gives that name, as in Calico:
				// the set holds (address . protocol . port), so a packet
				// of another protocol is never in it.
				*x.names = append(*x.names, p.PortName)
			case !portProto(proto):
				// Without a port protocol the transport header is not
				// ports (ICMP's checksum would be read as one).
				return s, fieldErr(field+"."+x.name, i, p, "needs protocol TCP, UDP, SCTP or UDPLite")
			case p.MinPort > p.MaxPort:
				return s, fieldErr(field+"."+x.name, i, p, "has its first port after its last")
			default:
				*x.nums = append(*x.nums, nftdp.PortRange{First: p.MinPort, Last: p.MaxPort})
			}
		}
	}
	if len(s.named)+len(s.notNamed) > 0 {
		// Whose named ports: the side's positive selector's endpoints,
		// else every endpoint of the cluster, also in a NetworkPolicy
		// (Calico looks a named port up with selector.All when the rule
		// has no positive selector): a Deny of port "metrics" denies
		// every pod's metrics port, whatever its namespace.
		s.portMatcher = s.sel
		if s.portMatcher == nil {
			if s.portMatcher, err = newMatcher(field, "", "", "", nil, ""); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

// portProto reports whether a protocol has ports nftables can match.
func portProto(proto uint8) bool { return proto == 6 || proto == 17 || proto == 132 || proto == 136 }

// sets lists the nftables sets the rule needs.
func (r *rule) sets() []setSpec {
	var out []setSpec
	for _, s := range []*side{&r.src, &r.dst} {
		for _, m := range []*matcher{s.sel, s.notSel} {
			if m != nil {
				out = append(out, addrSet(m))
			}
		}
		for _, n := range append(append([]string{}, s.named...), s.notNamed...) {
			out = append(out, namedPortSet(s.portMatcher, r.proto, n))
		}
	}
	return out
}
