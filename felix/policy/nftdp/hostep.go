package nftdp

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Host endpoints (Calico's HostEndpoint) are the node's own interfaces
// under policy. Their base chains exist only while the node has one, so
// a node without host endpoints has the tables it had before them:
//
//	host-raw-pre  (prerouting, -300) and host-raw-out (output, -300):
//	    doNotTrack policy of named interfaces; what it allows is not
//	    tracked (notrack) and carries the accept bit past the rest
//	host-prednat  (prerouting, -150, before DNAT at -100): preDNAT
//	    policy, ingress; what it allows carries the accept bit
//	host-input    (input, 10, after the pods' input chain at 0) and
//	host-output   (output, 10): normal policy of traffic to and from
//	    the host's own processes (a pod's traffic to its host meets its
//	    egress policy at 0 and the "*" endpoint's ingress here)
//	host-fwd-in   (forward, 2) and host-fwd-out (forward, 3): the
//	    applyOnForward policy of forwarded traffic
//
// Each starts with what no policy may cut: established flows (the
// filter chains), packets a raw or pre-DNAT policy allowed (the accept
// bit), IPv6 neighbour discovery, and the failsafe ports; then, in the
// endpoints' rank, each named interface goes to its chain, WireGuard's
// devices to their uplink's (HostDevice) and an address-found
// endpoint's own addresses to its (HostByAddr); then every other
// interface (but lo, and the pods' own in the output chain) to the
// "*" endpoint's. An interface with no chain for a context is accepted by
// that base chain (which ends only it). nftables runs every base chain
// of a hook, and a drop in any is final: these add to the pods' chains,
// they never let through what those drop.
const (
	chainHostRawPre  = "host-raw-pre"
	chainHostRawOut  = "host-raw-out"
	chainHostPreDNAT = "host-prednat"
	chainHostInput   = "host-input"
	chainHostOutput  = "host-output"
	chainHostFwdIn   = "host-fwd-in"
	chainHostFwdOut  = "host-fwd-out"
)

var hostBaseChains = []string{chainHostRawPre, chainHostRawOut, chainHostPreDNAT, chainHostInput, chainHostOutput, chainHostFwdIn, chainHostFwdOut}

// DefaultAcceptMark is the mark bit a doNotTrack or preDNAT policy's
// Allow sets, so that the later hooks' host endpoint chains let the
// packet through (Calico: such an allow skips normal policy).
const DefaultAcceptMark = 0x00400000

// WildcardIface is the interface name of a host endpoint for all of the
// host's interfaces.
const WildcardIface = "*"

// HostChains are one host endpoint's regular chains (set with SetChain)
// per context; "" where no policy of that context applies, which lets
// that context's traffic through.
type HostChains struct {
	// Iface is the interface, or WildcardIface.
	Iface string
	// In and Out police traffic to and from the host's own processes;
	// both must be set.
	In, Out string
	// FwdIn and FwdOut police forwarded traffic arriving on and leaving
	// by the interface (applyOnForward policy).
	FwdIn, FwdOut string
	// PreDNAT polices arriving traffic before DNAT.
	PreDNAT string
	// RawIn and RawOut police traffic before connection tracking (named
	// interfaces only, as in Calico).
	RawIn, RawOut string
	// Rank is the endpoint's place among the node's endpoints (their
	// names' order, in which one wins an interface two claim): an
	// address-found endpoint's guard (HostByAddr) is tried before the
	// interfaces dispatched to endpoints ranked after it.
	Rank int
}

// ProtoPort is a failsafe port: a protocol number (6 or 17) and port.
type ProtoPort struct {
	Proto uint8
	Port  uint16
}

// HostByAddr is a host endpoint found by its addresses (no interface
// name): felix dispatches the interfaces holding one of Addrs to its
// Chains (in Endpoints) once it has seen them hold it. Until then (an
// address just added or moved), the kernel itself sends a packet to one
// of Addrs arriving on the interface holding it, and one from one of
// them leaving by that interface, to Chains (nftables' fib: "daddr .
// iif type local"), so that the endpoint's own addresses are never
// open while felix catches up: before the interfaces felix dispatched to
// endpoints ranked after it (Chains.Rank), which it wins once felix
// looks, and, for IPv4 addresses (local, for that check, on the first
// of two interfaces holding one only), on every interface no endpoint
// governs while the node has no "*" endpoint. The rest of such an
// interface's traffic waits for felix. Chains.Iface is not used.
type HostByAddr struct {
	Addrs  []netip.Prefix
	Chains HostChains
}

// HostEndpoints is the host endpoint state of the node.
type HostEndpoints struct {
	// Endpoints, at most one per interface; the wildcard one applies to
	// every interface no other names.
	Endpoints []HostChains
	// ByAddr are the endpoints found by address; their guards go in
	// their Chains.Rank among Endpoints' interfaces, before the
	// wildcard.
	ByAddr []HostByAddr
	// FailsafeIn are opened to the host whatever the policy (destination
	// ports of arriving packets, source ports of what it sends back);
	// FailsafeOut likewise from the host.
	FailsafeIn, FailsafeOut []ProtoPort
	// TunnelPeers are the cluster's nodes (host prefixes): IPIP, VXLAN
	// and WireGuard packets between them and this host carry pod traffic, whose
	// own policy applies once decapsulated, and are let through
	// (Calico's too). To or from any other address they meet host
	// endpoint policy.
	TunnelPeers []netip.Prefix
	// TunnelPorts are the UDP destination ports of the nodes' tunnels
	// (the VXLAN devices' port, WireGuard's where it is on), as felix
	// configures them: a port not listed meets host endpoint policy.
	TunnelPorts []uint16
}

// tunnels accepts the IPIP, VXLAN and WireGuard packets from the other
// nodes (to them, with out), none when no node is known: an empty match
// would accept every address.
func tunnels(peers []netip.Prefix, ports []uint16, out bool) []Rule {
	if len(peers) == 0 {
		return nil
	}
	rules := []Rule{{Proto: 4, Action: ActAccept}}
	if len(ports) > 0 {
		udp := Rule{Proto: 17, Action: ActAccept}
		for _, p := range ports {
			udp.Dst.Ports = append(udp.Dst.Ports, PortRange{p, p})
		}
		rules = append(rules, udp)
	}
	for i := range rules {
		if out {
			rules[i].Dst.Nets = peers
		} else {
			rules[i].Src.Nets = peers
		}
	}
	return rules
}

// HostDevice is an interface that carries traffic which would
// otherwise cross another one: WireGuard's devices carry, encrypted
// between the nodes, what would cross the uplink holding the node's
// address. The host endpoint that governs Uplink governs Device too, in
// every context (raw, preDNAT, input, output, forward), so that
// encrypting traffic changes no verdict; an uplink no named endpoint
// governs leaves the device to the "*" endpoint or to no policy, as the
// uplink itself. Uplink "" is not known: while any named endpoint
// exists, the device's traffic to, from and through the host is then
// dropped (fail closed) but for what every base chain accepts first
// (established flows, failsafe ports, the tunnels, neighbour
// discovery). A device a named endpoint names itself keeps that one.
type HostDevice struct {
	Device, Uplink string
}

// hostDispatch is what the host base chains are rendered from: the last
// SetHostEndpoints and SetHostDevices.
type hostDispatch struct {
	eps  HostEndpoints
	devs []HostDevice
}

// SetHostDevices replaces the devices governed by their uplink's host
// endpoint and reports whether they changed (the host base chains are
// then rendered again).
func (d *Dataplane) SetHostDevices(devs []HostDevice) bool {
	devs = slices.Clone(devs)
	slices.SortFunc(devs, func(a, b HostDevice) int { return strings.Compare(a.Device, b.Device) })
	if slices.Equal(devs, d.host.devs) {
		return false
	}
	d.host.devs = devs
	d.renderHosts()
	return true
}

// SetHostEndpoints replaces the host endpoint state: with none, the
// host base chains go (the host is not policed).
func (d *Dataplane) SetHostEndpoints(h HostEndpoints) {
	d.host.eps = h
	d.renderHosts()
}

// renderHosts sets the host base chains from d.host.
func (d *Dataplane) renderHosts() {
	h := d.host.eps
	if len(h.Endpoints) == 0 && len(h.ByAddr) == 0 {
		for _, name := range hostBaseChains {
			if _, ok := d.chains[name]; ok {
				delete(d.chains, name)
				d.dirtyChains[name] = true
			}
		}
		return
	}
	eps := slices.Clone(h.Endpoints)
	slices.SortStableFunc(eps, func(a, b HostChains) int {
		switch {
		case a.Iface == b.Iface:
			return 0
		case a.Iface == WildcardIface:
			return 1
		case b.Iface == WildcardIface:
			return -1
		case a.Iface < b.Iface:
			return -1
		}
		return 1
	})
	eps = slices.CompactFunc(eps, func(a, b HostChains) bool { return a.Iface == b.Iface })
	p := d.cfg.IfacePrefix
	fsIn, fsOut := h.FailsafeIn, h.FailsafeOut
	prio := func(v int32) *nftables.ChainPriority { return nftables.ChainPriorityRef(nftables.ChainPriority(v)) }
	base := func(name string, num *nftables.ChainHook, pr int32, rules []Rule) {
		d.setInternal(name, &hook{num: num, prio: prio(pr)}, rules)
	}
	established := Rule{CtState: expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED, Action: ActAccept}
	accepted := Rule{IfAcceptMark: true, Action: ActAccept}
	clear := Rule{Action: ActClearAccept}

	// Raw runs before conntrack has a state: replies to the other
	// direction's failsafe flows are let through by source port there
	// only. Pre-DNAT runs after conntrack and accepts established and
	// related traffic first, as Calico's mangle PREROUTING does (a
	// preDNAT Deny of an address must not drop the replies of
	// connections to it); a source-port rule would let anyone past a
	// preDNAT Deny by connecting from port 179 or 53.
	tun, tunOut := tunnels(h.TunnelPeers, h.TunnelPorts, false), tunnels(h.TunnelPeers, h.TunnelPorts, true)
	rawPre := append(append([]Rule{clear}, ndRules()...), tun...)
	rawPre = append(append(rawPre, failsafe(fsIn, false)...), failsafe(fsOut, true)...)
	rawOut := append(append([]Rule{clear}, ndRules()...), tunOut...)
	rawOut = append(append(rawOut, failsafe(fsOut, false)...), failsafe(fsIn, true)...)
	preDNAT := append(append([]Rule{established, accepted}, ndRules()...), tun...)
	preDNAT = append(preDNAT, failsafe(fsIn, false)...)
	// A pod's traffic to its host meets the "*" endpoint's ingress
	// policy whatever a preDNAT policy allowed it (since the "*"
	// preDNAT policies see pods' packets): the accept bit is cleared
	// for pods' devices before it is honoured.
	input := append(append([]Rule{established, {InIface: p, Action: ActClearAccept}, accepted}, ndRules()...), tun...)
	input = append(append(input, failsafe(fsIn, false)...), Rule{InIface: "lo\x00", Action: ActAccept})
	output := append(append([]Rule{established, accepted}, ndRules()...), tunOut...)
	output = append(append(output, failsafe(fsOut, false)...),
		Rule{OutIface: "lo\x00", Action: ActAccept},
		// The host's traffic to its own pods is not policed (kubelet's
		// probes; Calico's default too): the pod's ingress polices it.
		Rule{OutIface: p, Action: ActAccept})
	// A preDNAT Allow skips the forward policy of the interface the
	// traffic came in by, not the applyOnForward egress policy of the
	// one it leaves by: Calico's forward dispatch to host endpoints is
	// unconditional and clears the accept bit first.
	fwdIn := []Rule{established, accepted}
	fwdOut := []Rule{established}

	// With address-found endpoints, a named interface without untracked
	// policy is accepted in the raw chains (not left to the rules after
	// it): a guard ranked after its endpoint must not apply there.
	rawAlways := len(h.ByAddr) > 0
	// named dispatches an interface to a named endpoint's chains.
	named := func(iface string, ep HostChains) {
		in, out := Rule{InIface: iface + "\x00"}, Rule{OutIface: iface + "\x00"}
		input = appendHostJump(input, in, ep.In)
		output = appendHostJump(output, out, ep.Out)
		preDNAT = appendHostJump(preDNAT, in, ep.PreDNAT)
		fwdIn = appendHostJump(fwdIn, in, ep.FwdIn)
		fwdOut = appendHostJump(fwdOut, out, ep.FwdOut)
		if ep.RawIn != "" || rawAlways {
			rawPre = appendHostJump(rawPre, in, ep.RawIn)
		}
		if ep.RawOut != "" || rawAlways {
			rawOut = appendHostJump(rawOut, out, ep.RawOut)
		}
	}
	// guard sends the address-found endpoint's own addresses' traffic to
	// its chains: held by the interface (inAct, outAct: the kernel's
	// per-interface check), or, for the ambiguous IPv4 case, by any.
	notGuarded := []string{p, "lo\x00"}
	guard := func(ba HostByAddr, addrs []netip.Prefix, ipv uint8, inAct, outAct Action) {
		in := Rule{IPVersion: ipv, NotInIfaces: notGuarded, Dst: Side{Nets: addrs}}
		out := Rule{IPVersion: ipv, NotOutIfaces: notGuarded, Src: Side{Nets: addrs}}
		c := ba.Chains
		input = append(input, localJump(in, inAct, c.In))
		output = append(output, localJump(out, outAct, c.Out))
		preDNAT = append(preDNAT, localJump(in, inAct, c.PreDNAT))
		rawPre = append(rawPre, localJump(in, inAct, c.RawIn))
		rawOut = append(rawOut, localJump(out, outAct, c.RawOut))
	}

	// What governs an interface is decided in the endpoints' rank (their
	// names' order, as felix shadows them): each interface felix has
	// dispatched, and each address-found endpoint's guard, at its
	// endpoint's rank. So a packet to an address an interface took since
	// felix last looked meets the endpoint that wins the interface now:
	// the guard's, when it ranks before the one felix dispatched there
	// (an address moved to an interface another endpoint governs), the
	// dispatched one otherwise; once felix has looked, both agree.
	type step struct {
		rank  int
		guard bool
		emit  func()
	}
	var steps []step
	byIface := map[string]HostChains{}
	for _, ep := range eps {
		if ep.Iface != WildcardIface {
			byIface[ep.Iface] = ep
			steps = append(steps, step{ep.Rank, false, func() { named(ep.Iface, ep) }})
		}
	}
	// The devices, at their uplink's endpoint's rank, before "*".
	for _, dev := range d.host.devs {
		if _, own := byIface[dev.Device]; own || len(byIface) == 0 {
			continue
		}
		if ep, ok := byIface[dev.Uplink]; ok {
			steps = append(steps, step{ep.Rank, false, func() { named(dev.Device, ep) }})
			continue
		}
		if dev.Uplink != "" {
			continue // the uplink's fate: "*" or no policy
		}
		// Unknown uplink: no "*" preDNAT allow (its accept bit would
		// pass the drops), and nothing new to, from or through the
		// host.
		in, out := Rule{InIface: dev.Device + "\x00"}, Rule{OutIface: dev.Device + "\x00"}
		preDNAT = appendHostJump(preDNAT, in, "")
		in.Action, out.Action = ActDrop, ActDrop
		input, output = append(input, in), append(output, out)
		fwdIn, fwdOut = append(fwdIn, in), append(fwdOut, out)
	}
	// Interfaces holding an address-found endpoint's address that felix
	// has not dispatched (or dispatched to an endpoint ranked after it):
	// its own addresses' traffic (not pods', not lo's).
	for _, ba := range h.ByAddr {
		steps = append(steps, step{ba.Chains.Rank, true, func() { guard(ba, ba.Addrs, 0, ActGotoLocalDst, ActGotoLocalSrc) }})
	}
	slices.SortStableFunc(steps, func(a, b step) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		switch {
		case a.guard == b.guard:
			return 0
		case b.guard:
			return -1
		}
		return 1
	})
	for _, s := range steps {
		s.emit()
	}
	// An IPv4 address two interfaces hold is local, for the kernel's
	// per-interface check, on the first to take it only: on an
	// interface no endpoint governs, the endpoint's IPv4 addresses meet
	// its chains wherever they are local (the second holder's traffic
	// before felix dispatches it, and, with no way for the kernel to
	// tell them apart, such traffic arriving on an interface that does
	// not hold them). With a "*" endpoint that one governs such
	// interfaces, as before.
	if !slices.ContainsFunc(eps, func(ep HostChains) bool { return ep.Iface == WildcardIface }) {
		for _, ba := range h.ByAddr {
			if v4 := NetsIn(4, ba.Addrs); len(v4) > 0 {
				guard(ba, v4, 4, ActGotoAnyLocalDst, ActGotoAnyLocalSrc)
			}
		}
	}
	for _, ep := range eps {
		if ep.Iface == WildcardIface {
			// The pods' devices too, as Calico's pre-DNAT and forward
			// dispatch send every interface no named endpoint names
			// to the "*" chains: a "*" preDNAT or applyOnForward
			// policy polices the pods' traffic as well (the output
			// chain has accepted the host's traffic to its pods).
			notLo := []string{"lo\x00"}
			input = append(input, Rule{Action: ActJump, Goto: true, Target: ep.In})
			output = append(output, Rule{Action: ActJump, Goto: true, Target: ep.Out})
			preDNAT = appendHostJump(preDNAT, Rule{NotInIfaces: notLo}, ep.PreDNAT)
			fwdIn = appendHostJump(fwdIn, Rule{NotInIfaces: notLo}, ep.FwdIn)
			fwdOut = appendHostJump(fwdOut, Rule{NotOutIfaces: notLo}, ep.FwdOut)
		}
	}
	base(chainHostRawPre, nftables.ChainHookPrerouting, -300, rawPre)
	base(chainHostRawOut, nftables.ChainHookOutput, -300, rawOut)
	base(chainHostPreDNAT, nftables.ChainHookPrerouting, -150, preDNAT)
	base(chainHostInput, nftables.ChainHookInput, 10, input)
	base(chainHostOutput, nftables.ChainHookOutput, 10, output)
	base(chainHostFwdIn, nftables.ChainHookForward, 2, fwdIn)
	base(chainHostFwdOut, nftables.ChainHookForward, 3, fwdOut)
}

// appendHostJump sends what match picks to chain (goto: the chain's end
// is the base chain's), or accepts it in this base chain when chain is
// "", so that no later (wildcard) rule of the base chain sees it.
func appendHostJump(rules []Rule, match Rule, chain string) []Rule {
	if chain == "" {
		match.Action = ActAccept
	} else {
		match.Action, match.Goto, match.Target = ActJump, true, chain
	}
	return append(rules, match)
}

// jumps reports whether r goes on in chain Target when it matches (a
// jump or goto, or a host endpoint's local-address goto).
func (r *Rule) jumps() bool {
	switch r.Action {
	case ActJump:
		return true
	case ActGotoLocalDst, ActGotoLocalSrc, ActGotoAnyLocalDst, ActGotoAnyLocalSrc:
		return r.Target != ""
	}
	return false
}

// localJump is match with act (ActGotoLocalDst, ActGotoLocalSrc or
// their any-interface forms) to
// chain ("": accept, as appendHostJump).
func localJump(match Rule, act Action, chain string) Rule {
	match.Action, match.Target = act, chain
	return match
}

// ndRules accept IPv6 neighbour discovery and MLD: without them the
// host's IPv6 stops working at all.
func ndRules() []Rule {
	out := make([]Rule, 0, len(ndTypes))
	for _, t := range ndTypes {
		out = append(out, Rule{IPVersion: 6, Proto: 58, ICMP: &ICMPMatch{Type: t, Code: -1}, Action: ActAccept})
	}
	return out
}

// failsafe accepts the ports' packets, by destination port (or, with
// reply, by source port: the other end of such a flow).
func failsafe(ports []ProtoPort, reply bool) []Rule {
	byProto := map[uint8][]PortRange{}
	var protos []uint8
	for _, pp := range ports {
		if _, ok := byProto[pp.Proto]; !ok {
			protos = append(protos, pp.Proto)
		}
		byProto[pp.Proto] = append(byProto[pp.Proto], PortRange{pp.Port, pp.Port})
	}
	slices.Sort(protos)
	var out []Rule
	for _, proto := range protos {
		r := Rule{Proto: proto, Counter: true, Action: ActAccept}
		if reply {
			r.Src.Ports = byProto[proto]
		} else {
			r.Dst.Ports = byProto[proto]
		}
		out = append(out, r)
	}
	return out
}

// setInternal sets one of this package's own chains (unchanged content
// is no change).
func (d *Dataplane) setInternal(name string, h *hook, rules []Rule) {
	if c, ok := d.chains[name]; ok && c.hook.String() == h.String() && len(c.rules) == len(rules) {
		same := true
		for i := range rules {
			if c.keys[i] != rules[i].key() {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	d.addInternal(name, h, rules)
}

// isHostBase reports whether name is one of the host base chains.
func isHostBase(name string) bool { return slices.Contains(hostBaseChains, name) }

// hostExprs renders the host endpoint matches of a rule (interfaces it
// must not be on, the accept bit).
func (rd *renderer) hostExprs(r *Rule) []expr.Any {
	var ex []expr.Any
	for _, m := range []struct {
		key  expr.MetaKey
		list []string
	}{{expr.MetaKeyIIFNAME, r.NotInIfaces}, {expr.MetaKeyOIFNAME, r.NotOutIfaces}} {
		for _, prefix := range m.list {
			ex = append(ex, &expr.Meta{Key: m.key, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte(prefix)})
		}
	}
	if r.IfAcceptMark {
		ex = append(ex, rd.testBits(rd.acceptMark, true)...)
	}
	return ex
}

// hostAction renders the host endpoint actions; ok is false for others.
func (rd *renderer) hostAction(r *Rule) (ex []expr.Any, ok bool) {
	switch r.Action {
	case ActMarkAccept:
		return append(rd.setBits(rd.acceptMark, true), &expr.Verdict{Kind: expr.VerdictAccept}), true
	case ActNotrack:
		return append(append([]expr.Any{&expr.Notrack{}}, rd.setBits(rd.acceptMark, true)...), &expr.Verdict{Kind: expr.VerdictAccept}), true
	case ActClearAccept:
		return rd.setBits(rd.acceptMark, false), true
	case ActGotoLocalDst, ActGotoLocalSrc, ActGotoAnyLocalDst, ActGotoAnyLocalSrc:
		// fib <addr> . <iface> type local: the address is one the
		// interface itself holds (the kernel's local route is on it);
		// without the interface, one the host holds.
		var fib *expr.Fib
		switch r.Action {
		case ActGotoLocalDst:
			fib = &expr.Fib{Register: reg1, ResultADDRTYPE: true, FlagDADDR: true, FlagIIF: true}
		case ActGotoLocalSrc:
			fib = &expr.Fib{Register: reg1, ResultADDRTYPE: true, FlagSADDR: true, FlagOIF: true}
		case ActGotoAnyLocalDst:
			fib = &expr.Fib{Register: reg1, ResultADDRTYPE: true, FlagDADDR: true}
		default:
			fib = &expr.Fib{Register: reg1, ResultADDRTYPE: true, FlagSADDR: true}
		}
		v := &expr.Verdict{Kind: expr.VerdictGoto, Chain: r.Target}
		if r.Target == "" {
			v = &expr.Verdict{Kind: expr.VerdictAccept}
		}
		return []expr.Any{fib, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ne32(unix.RTN_LOCAL)}, v}, true
	case ActJump:
		if r.Goto {
			return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: r.Target}}, true
		}
	}
	return nil, false
}
