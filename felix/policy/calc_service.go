package policy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// Service rules (Calico's EntityRule.Services).
//
// A rule naming a Service matches the endpoints of its ServiceEndpoints
// record (written by routed's controllers from the Service's
// EndpointSlices): in a destination, address . protocol . port in a set
// of the named-port kind (`n-`), holding every (address, protocol,
// port) of the Service's endpoints (of the rule's protocol, when it
// has one); in a source, the address in an address set (`s-`).
//
// Such a side is compiled like a selector's, with a matcher that picks
// no endpoint and no network set and whose id names the Service, so its
// sets are named, counted, guarded, rendered and deleted like any
// selector's; the only members they get are the Service's, given by
// SetServiceEndpoints as a contribution under serviceContribution (the
// way a network set contributes its nets), so a change of endpoints
// changes set members only, never a chain. A Service with no record or
// no endpoints gives no members: its rules match nothing (an Allow lets
// nothing through).

// serviceIDPrefix starts the id of a service's matcher; a selector's
// id starts "sel=".
const serviceIDPrefix = "service="

// service is what the calculator keeps of one Service: its record's
// addresses and (address, protocol, port) members, masked and distinct
// (none without a record), and the names of the sets that name it (a
// set deleted since is dropped from sets when next looked at).
type service struct {
	addrs []nftdp.Member
	ports []nftdp.Member
	sets  map[string]bool
}

// serviceFor returns the Service key's entry, made empty if missing.
func (c *Calc) serviceFor(key string) *service {
	if c.services == nil {
		c.services = map[string]*service{}
	}
	sv := c.services[key]
	if sv == nil {
		sv = &service{sets: map[string]bool{}}
		c.services[key] = sv
	}
	return sv
}

// serviceMatcher is the matcher of a rule side naming the Service key
// ("<namespace>/<name>"): no endpoint or network set passes it (its
// scope is a namespace no object can have, as names never hold '/').
func serviceMatcher(key string) *matcher {
	return &matcher{id: serviceIDPrefix + key, scope: scopeOwnNS, ns: "/"}
}

// serviceOf returns the Service key a set's matcher names, if any.
func serviceOf(sp setSpec) (string, bool) {
	if sp.m == nil {
		return "", false
	}
	return strings.CutPrefix(sp.m.id, serviceIDPrefix)
}

// serviceContribution is the key a Service's members are kept under in
// a set's contributions (network sets use "ns:" and "gns:").
func serviceContribution(key string) string { return "svc:" + key }

// compileServices compiles an entity's services match into s (dst: the
// rule's destination). policyNS is a NetworkPolicy's namespace, the
// default; api validation has already refused what Calico refuses, and
// this refuses again what the calculator could not honour.
func compileServices(field string, e *api.EntityRule, s *side, dst bool, policyNS string) error {
	sm := e.Services
	if sm == nil {
		return nil
	}
	f := field + ".services"
	ns := sm.Namespace
	if ns == "" {
		ns = policyNS
	}
	switch {
	case sm.Name == "" || strings.Contains(sm.Name, "/"):
		return fieldErr(f+".name", -1, sm.Name, "must name a Kubernetes Service")
	case ns == "" || strings.Contains(ns, "/"):
		return fieldErr(f+".namespace", -1, sm.Namespace, "is required outside a NetworkPolicy")
	case s.sel != nil || s.notSel != nil || len(s.nets)+len(s.notNets) > 0:
		return fieldErr(f, -1, sm.Name, "cannot be combined with nets, selectors or service accounts")
	case dst && len(s.ports)+len(s.notPorts)+len(s.named)+len(s.notNamed) > 0:
		return fieldErr(field+".ports", -1, sm.Name, "cannot be given with destination.services: the Service's ports are matched")
	}
	m := serviceMatcher(ns + "/" + sm.Name)
	if dst {
		// One named-port alternative whose set holds the Service's
		// (address, protocol, port) members.
		s.named, s.portMatcher = []string{""}, m
	} else {
		s.sel = m
	}
	return nil
}

// serviceFromAPI reads a record; a bad address or port is refused
// naming its field.
func serviceFromAPI(r *api.ServiceEndpoints) (*service, error) {
	sv := &service{}
	seenA := map[nftdp.Member]bool{}
	seenP := map[nftdp.Member]bool{}
	for i, sub := range r.Spec.Subsets {
		f := "spec.subsets[" + strconv.Itoa(i) + "]"
		type pp struct {
			proto uint8
			port  uint16
		}
		var ports []pp
		for j, p := range sub.Ports {
			n, ok := p.Protocol.Num()
			if !ok || (n != 6 && n != 17 && n != 132) {
				return nil, fieldErr(f+".ports", j, p.Protocol.String(), "protocol must be TCP, UDP or SCTP")
			}
			if p.Port == 0 {
				return nil, fieldErr(f+".ports", j, p.Port, "port must be 1-65535")
			}
			ports = append(ports, pp{n, p.Port})
		}
		for j, a := range sub.Addresses {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				return nil, fieldErr(f+".addresses", j, a, "is not an IP address")
			}
			addr = addr.Unmap()
			pfx := netip.PrefixFrom(addr, addr.BitLen())
			if m := (nftdp.Member{Prefix: pfx}); !seenA[m] {
				seenA[m] = true
				sv.addrs = append(sv.addrs, m)
			}
			for _, p := range ports {
				if m := (nftdp.Member{Prefix: pfx, Proto: p.proto, Port: p.port}); !seenP[m] {
					seenP[m] = true
					sv.ports = append(sv.ports, m)
				}
			}
		}
	}
	return sv, nil
}

// members is what the service gives a set of spec: its addresses, or
// its ports of the set's protocol (any, when the rule has none).
func (sv *service) members(sp setSpec) []nftdp.Member {
	if sv == nil {
		return nil
	}
	if sp.kind == nftdp.AddrSet {
		return sv.addrs
	}
	if sp.proto == 0 {
		return sv.ports
	}
	var out []nftdp.Member
	for _, m := range sv.ports {
		if m.Proto == sp.proto {
			out = append(out, m)
		}
	}
	return out
}

// SetServiceEndpoints adds or replaces the endpoints of the Service
// key ("<namespace>/<name>"): the sets of rules naming it change their
// members (and their guards'), nothing else. On an error nothing
// changes.
func (c *Calc) SetServiceEndpoints(key string, r *api.ServiceEndpoints) error {
	rec, err := serviceFromAPI(r)
	if err != nil {
		return err
	}
	sv := c.serviceFor(key)
	sv.addrs, sv.ports = rec.addrs, rec.ports
	c.refillService(key)
	return nil
}

// DeleteServiceEndpoints forgets a Service's endpoints: its rules match
// nothing from then on.
func (c *Calc) DeleteServiceEndpoints(key string) {
	sv := c.services[key]
	if sv == nil {
		return
	}
	sv.addrs, sv.ports = nil, nil
	c.refillService(key)
	if len(sv.sets) == 0 {
		delete(c.services, key)
	}
}

// refillService gives every active set naming the Service its current
// members (the sets fillServiceSets saw made; those deleted since are
// forgotten here).
func (c *Calc) refillService(key string) {
	sv := c.services[key]
	if sv == nil {
		return
	}
	for name := range sv.sets {
		s := c.sets[name]
		if s == nil {
			delete(sv.sets, name)
			continue
		}
		c.contributeService(s, key)
	}
}

// fillServiceSets gives the sets of specs that name a Service and have
// not had its members yet (sets just made by refSets) their members.
func (c *Calc) fillServiceSets(specs []setSpec) {
	for _, sp := range specs {
		key, ok := serviceOf(sp)
		if !ok {
			continue
		}
		if s := c.sets[sp.name]; s != nil {
			c.serviceFor(key).sets[sp.name] = true
			if _, done := s.nets[serviceContribution(key)]; !done {
				c.contributeService(s, key)
			}
		}
	}
}

// contributeService replaces what the Service gives s by its current
// members, writing only the difference (a Service can have thousands
// of members: the difference is taken through maps).
func (c *Calc) contributeService(s *aset, key string) {
	ck := serviceContribution(key)
	before := s.nets[ck]
	now := c.services[key].members(s.spec)
	had := make(map[nftdp.Member]bool, len(before))
	for _, m := range before {
		had[m] = true
	}
	var added, removed []nftdp.Member
	for _, m := range now {
		if !had[m] {
			added = append(added, m)
		}
		delete(had, m)
	}
	for _, m := range before {
		if had[m] {
			removed = append(removed, m)
		}
	}
	// added and removed are disjoint: changeMembers adds every one of
	// the first and removes every one of the second.
	c.changeMembers(s, removed, added)
	if len(now) == 0 {
		delete(s.nets, ck)
		return
	}
	s.nets[ck] = slices.Clone(now)
}

// serviceMembers are the members a set naming a Service holds (for
// Explain): none for other sets.
func (c *Calc) serviceMembers(sp setSpec) []nftdp.Member {
	key, ok := serviceOf(sp)
	if !ok {
		return nil
	}
	return c.services[key].members(sp)
}

// SetServiceEndpoints adds or replaces a Service's endpoints record.
func (m *Manager) SetServiceEndpoints(r *api.ServiceEndpoints) error {
	return m.calc.SetServiceEndpoints(r.Metadata.Namespace+"/"+r.Metadata.Name, r)
}

// DeleteServiceEndpoints removes a Service's endpoints record.
func (m *Manager) DeleteServiceEndpoints(namespace, name string) {
	m.calc.DeleteServiceEndpoints(namespace + "/" + name)
}
