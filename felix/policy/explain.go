package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// Flow is the first packet of a new connection, as Explain evaluates
// it (established traffic is accepted before any policy).
type Flow struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode: -1 when not ICMP.
	ICMPType, ICMPCode int
	// From is the key of the workload endpoint that sends the packet
	// (whose interface it leaves); empty: the workload holding Src.
	// Src need not be From's: a source with no route back to From's
	// interface is dropped on From's node before any policy (the
	// reverse-path check; see sourceIsSenders), and otherwise From's
	// egress policy decides, as the kernel picks it by interface.
	From string
}

// Decision is what one direction's policy does with a flow.
type Decision struct {
	Direction string `json:"direction"`
	// Endpoint is the workload whose policy decides (the source for
	// egress, the destination for ingress), Node its node; empty when
	// the address is no workload: then nothing is policed.
	Endpoint string `json:"endpoint,omitempty"`
	Node     string `json:"node,omitempty"`
	Policed  bool   `json:"policed"`
	Allowed  bool   `json:"allowed"`
	// Rule decided; for a flow not policed its Kind is KindNotPoliced.
	Rule RuleInfo `json:"rule"`
	// Passed are the Pass rules (and a profile's Pass) on the way,
	// Logged the Log rules the packet met.
	Passed []RuleInfo `json:"passed,omitempty"`
	Logged []RuleInfo `json:"logged,omitempty"`
}

// Explanation is a flow's fate in both directions: the source's egress
// and the destination's ingress must both allow it.
type Explanation struct {
	Egress  Decision `json:"egress"`
	Ingress Decision `json:"ingress"`
}

// Allowed reports whether both directions allow the flow.
func (e Explanation) Allowed() bool { return e.Egress.Allowed && e.Ingress.Allowed }

// Explain evaluates a flow against the model: for each direction it
// renders the chains felix programs for the endpoint (the same code,
// so the same tiers, order, selectors, sets and named ports) and walks
// them as nftables would for that packet. It changes nothing. Traffic
// from a node to its own pods is not policed at all and is not what
// this answers (see README).
func (c *Calc) Explain(f Flow) Explanation {
	return Explanation{Egress: c.decide(f, false), Ingress: c.decide(f, true)}
}

// EndpointAt returns the key of the endpoint holding addr ("" if none).
func (c *Calc) EndpointAt(addr netip.Addr) string {
	if e := c.endpointAt(addr); e != nil {
		return e.key
	}
	return ""
}

// Endpoint returns an endpoint as the calculator keeps it: as it was
// given, but that a remote endpoint's interface and pod are not kept.
func (c *Calc) Endpoint(key string) (Endpoint, bool) {
	e := c.endpoint(key)
	if e == nil {
		return Endpoint{}, false
	}
	g := e.g
	ep := Endpoint{Key: e.key, Node: e.nodeName(), Namespace: g.ns, ServiceAccount: g.sa, Labels: maps.Collect(g.own.all()),
		Profiles: slices.Clone(g.profiles), IPs: e.ipList(), Ports: slices.Clone(g.ports)}
	if l := c.locals[key]; l != nil {
		ep.Local, ep.Iface, ep.Pod = true, l.iface, l.pod
	}
	return ep, true
}

// Endpoints returns the keys of every endpoint, sorted.
func (c *Calc) Endpoints() []string {
	keys := make([]string, 0, c.weps.n+len(c.eps))
	for e := range c.allEndpoints() {
		keys = append(keys, e.key)
	}
	slices.Sort(keys)
	return keys
}

func (c *Calc) endpointAt(addr netip.Addr) *endpoint { return c.findAt(addr, true) }

// workloadAt is endpointAt for workload endpoints only.
func (c *Calc) workloadAt(addr netip.Addr) *endpoint { return c.findAt(addr, false) }

func (c *Calc) findAt(addr netip.Addr, hosts bool) *endpoint {
	if c.at != nil {
		return c.at.endpoint(addr, hosts)
	}
	var found *endpoint
	for e := range c.allEndpoints() {
		if !hosts && IsHostEndpointKey(e.key) {
			continue
		}
		for p := range e.prefixes() {
			if p.Contains(addr) && (found == nil || e.key < found.key) {
				found = e
			}
		}
	}
	return found
}

func (c *Calc) decide(f Flow, in bool) Decision {
	d := Decision{Direction: dirName(in)}
	addr := f.Src
	if in {
		addr = f.Dst
	}
	var sender *endpoint
	if f.From != "" {
		var done bool
		if sender, done = c.decideSender(f, in, &d); done {
			return d
		}
	}
	if c.decideEncap(f, sender, in, &d) {
		return d
	}
	e := c.workloadAt(addr)
	if !in && sender != nil {
		e = sender
	}
	if e == nil {
		// Host endpoints' chains (hostep) are not walked here: say so
		// rather than answer with a pod's semantics or "not policed".
		d.Allowed = true
		d.Rule = RuleInfo{Kind: KindNotPoliced, Direction: d.Direction, Index: -1}
		if h := c.endpointAt(addr); h != nil {
			d.Endpoint, d.Node = h.key, h.nodeName()
			d.Rule.Kind = KindHostNotExplained
		}
		return d
	}
	d.Endpoint, d.Node, d.Policed = e.key, e.nodeName(), true
	inPols, outPols := c.policiesFor(e.g)
	x := &interp{c: c, f: f, v: 4, d: &d, chains: map[string]chainDef{}, sets: map[string]setSpec{}, guards: map[string]guardSpec{}}
	if !f.Src.Is4() {
		x.v = 6
	}
	name, rules, infos, runs := c.endpointChain(e, inPols, outPols, in)
	x.chains[name] = chainDef{rules, infos}
	for _, r := range runs {
		x.chains[r.chain] = chainDef{r.rules(), nil}
		x.guards[r.guard.name] = r.guard
		x.addSets(r.guard.sets)
	}
	pols := outPols
	if in {
		pols = inPols
	}
	for _, p := range pols {
		rules, infos := c.policyChain(p, in)
		x.chains[p.chain(in)] = chainDef{rules, infos}
		x.addSets(p.sets())
	}
	for _, n := range e.g.profiles {
		if p := c.profiles[n]; p != nil {
			rules, infos := c.profileChain(p, in)
			x.chains[p.chain(in)] = chainDef{rules, infos}
			x.addSets(p.sets())
		}
	}
	d.Allowed = x.run(name) == vAccept
	return d
}

type chainDef struct {
	rules []nftdp.Rule
	infos map[string]RuleInfo
}

type verdict uint8

const (
	vReturn verdict = iota
	vAccept
	vDrop
)

// interp walks rendered chains for one packet as the kernel does.
type interp struct {
	c      *Calc
	f      Flow
	v      uint8
	d      *Decision
	chains map[string]chainDef
	sets   map[string]setSpec
	guards map[string]guardSpec
	mark   bool // the pass bit
}

func (x *interp) addSets(specs []setSpec) {
	for _, s := range specs {
		x.sets[s.name] = s
	}
}

func (x *interp) run(name string) verdict {
	def := x.chains[name]
	for i := range def.rules {
		r := &def.rules[i]
		if !x.matches(r) {
			continue
		}
		info := def.infos[r.ID]
		switch r.Action {
		case nftdp.ActClearPass:
			x.mark = false
		case nftdp.ActLog:
			if r.ID != "" {
				x.d.Logged = append(x.d.Logged, info)
			}
		case nftdp.ActAccept:
			x.d.Rule = info
			return vAccept
		case nftdp.ActDrop:
			x.d.Rule = info
			return vDrop
		case nftdp.ActPass:
			x.mark = true
			x.d.Passed = append(x.d.Passed, info)
			return vReturn
		case nftdp.ActReturn:
			x.d.Passed = append(x.d.Passed, info)
			return vReturn
		case nftdp.ActJump:
			if v := x.run(r.Target); v != vReturn {
				return v
			}
		}
	}
	return vReturn
}

func (x *interp) matches(r *nftdp.Rule) bool {
	f := x.f
	if (r.IfPassClear && x.mark) || (r.IfPassSet && !x.mark) || !r.InFamily(x.v) {
		return false
	}
	if p := r.ProtocolIn(x.v); p != 0 && p != f.Proto {
		return false
	}
	if r.NotProto != 0 && r.NotProto == f.Proto {
		return false
	}
	if m := r.ICMP; m != nil && (f.ICMPType != int(m.Type) || (m.Code >= 0 && f.ICMPCode != m.Code)) {
		return false
	}
	if m := r.NotICMP; m != nil && f.ICMPType == int(m.Type) && (m.Code < 0 || f.ICMPCode == m.Code) {
		return false
	}
	return x.side(&r.Src, f.Src, f.SrcPort) && x.side(&r.Dst, f.Dst, f.DstPort)
}

func (x *interp) side(s *nftdp.Side, a netip.Addr, port uint16) bool {
	if nets := nftdp.NetsIn(x.v, s.Nets); len(nets) > 0 && !containsAddr(nets, a) {
		return false
	}
	if containsAddr(nftdp.NetsIn(x.v, s.NotNets), a) {
		return false
	}
	for _, n := range s.Sets {
		if !x.inSet(n, a, 0) {
			return false
		}
	}
	for _, n := range s.NotSets {
		if x.inSet(n, a, 0) {
			return false
		}
	}
	if len(s.Ports) > 0 && !inPorts(s.Ports, port) {
		return false
	}
	if inPorts(s.NotPorts, port) {
		return false
	}
	if s.NamedPortSet != "" && !x.inSet(s.NamedPortSet, a, port) {
		return false
	}
	for _, n := range s.NotNamedPortSets {
		if x.inSet(n, a, port) {
			return false
		}
	}
	return true
}

// inSet asks whether a set felix would fill for this selector (or named
// port) holds the address (and protocol and port): the members are
// computed by the same code that fills the kernel's sets.
func (x *interp) inSet(name string, a netip.Addr, port uint16) bool {
	if g, ok := x.guards[name]; ok {
		if containsAddr(nftdp.NetsIn(x.v, g.nets), a) {
			return true
		}
		for _, s := range g.sets {
			if x.inSet(s.name, a, 0) {
				return true
			}
		}
		return false
	}
	spec, ok := x.sets[name]
	if !ok {
		return false
	}
	s := &aset{spec: spec}
	has := func(ms []nftdp.Member) bool {
		for _, m := range ms {
			if m.Prefix.Contains(a) && (spec.kind == nftdp.AddrSet || (m.Proto == x.f.Proto && m.Port == port)) {
				return true
			}
		}
		return false
	}
	for e := range x.c.allEndpoints() {
		if has(s.endpointMembers(e)) {
			return true
		}
	}
	for _, n := range x.c.netsets {
		if has(s.netsetMembers(n)) {
			return true
		}
	}
	return has(x.c.serviceMembers(spec)) // a Service's (calc_service.go)
}

func containsAddr(nets []netip.Prefix, a netip.Addr) bool {
	for _, p := range nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func inPorts(ps []nftdp.PortRange, port uint16) bool {
	for _, p := range ps {
		if port >= p.First && port <= p.Last {
			return true
		}
	}
	return false
}

// discard is a Sink that programs nothing.
type discard struct{}

func (discard) SetChain(string, []nftdp.Rule) error                { return nil }
func (discard) DeleteChain(string)                                 {}
func (discard) AddSet(string, nftdp.SetKind)                       {}
func (discard) DeleteSet(string)                                   {}
func (discard) AddMember(string, nftdp.Member)                     {}
func (discard) RemoveMember(string, nftdp.Member)                  {}
func (discard) SetEndpoint(string, string, string, nftdp.Families) {}
func (discard) DeleteEndpoint(string)                              {}

// NewModel returns a calculator that programs nothing, for explaining
// flows from the datastore's resources (SetResource).
func NewModel() *Calc {
	c := NewCalc(discard{}, LogConfig{})
	c.at = newAddrIndex()
	return c
}

// SetResource hands the model one resource of the policy kinds (every
// endpoint is taken as remote: nothing is rendered until Explain);
// other kinds are ignored (HostEndpoints too: see
// SetHostEndpointOfNode). An invalid one is refused with ErrInvalid; a
// policy refused for its rules is modelled as felix installs it, a deny
// of what it selects (Manager.SetPolicyFailClosed), and one of which
// nothing would be in force as felix denies for it (RefusalFailsClosed,
// SetUnreadable).
func (c *Calc) SetResource(r api.Resource) error {
	err := c.setResource(r)
	if RefusalFailsClosed(r.GetKind(), err) {
		// As felix: nothing of it is in force, so it is denied for as
		// a record that does not decode.
		if uerr := c.setUnreadable(r.GetKind(), api.StoreName(r), err); uerr == nil {
			return fmt.Errorf("%w (denied for as an unreadable record, as felix does)", err)
		}
	}
	return err
}

func (c *Calc) setResource(r api.Resource) error {
	switch v := r.(type) {
	case *api.Tier:
		c.SetTier(v)
	case api.Policy:
		return c.setPolicyFailClosed(v)
	case *api.Profile:
		return c.SetProfile(v)
	case *api.NetworkSet:
		s, err := netsetFromAPI("ns:"+v.Metadata.Namespace+"/"+v.Metadata.Name, v.Metadata.Namespace, v.Metadata.Labels, v.Spec.Nets)
		if err != nil {
			return err
		}
		c.SetNetworkSet(s)
	case *api.GlobalNetworkSet:
		s, err := netsetFromAPI("gns:"+v.Metadata.Name, "", v.Metadata.Labels, v.Spec.Nets)
		if err != nil {
			return err
		}
		c.SetNetworkSet(s)
	case *api.WorkloadEndpoint:
		ep, err := EndpointFromAPI(v, false)
		if err != nil {
			return err
		}
		c.SetEndpoint(ep)
	case *api.ServiceEndpoints:
		return c.SetServiceEndpoints(v.Metadata.Namespace+"/"+v.Metadata.Name, v)
	}
	return nil
}
