package nftdp

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// hook makes a chain a base chain.
type hook struct {
	num  *nftables.ChainHook
	prio *nftables.ChainPriority
}

// Base and shared chains. Egress and ingress of forwarded traffic are two
// base chains on the forward hook so that an egress Allow (accept) ends
// only the egress evaluation and the packet still meets the destination
// pod's ingress chain at the next priority.
const (
	chainFwdEgress  = "forward-egress"
	chainFwdIngress = "forward-ingress"
	chainInput      = "input"
	chainFromWL     = "from-wl"
	chainToWL       = "to-wl"
	chainFromWLHost = "from-wl-host"
	// chainSpoofed+direction ("spoofed-src-egress", "spoofed-src-to-host")
	// drop packets from workloads whose source is not theirs.
	chainSpoofed = "spoofed-src-"
	// chainSpoofCheck (prerouting) sends them there.
	chainSpoofCheck = "spoof-check"
)

// unspecified is IPv6's ::, no route's destination: the reverse-path
// check would drop every packet from it, so it is checked on its own.
var unspecified = []netip.Prefix{netip.MustParsePrefix("::/128")}

// zeroSource is IPv4's 0.0.0.0; dhcpDests the destinations of a DHCP
// client's requests from it (the limited broadcast, local multicast);
// ipv4Multicast those of IGMP reports.
var (
	zeroSource    = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32")}
	dhcpDests     = []netip.Prefix{netip.MustParsePrefix("255.255.255.255/32"), netip.MustParsePrefix("224.0.0.0/24")}
	ipv4Multicast = []netip.Prefix{netip.MustParsePrefix("224.0.0.0/4")}
)

// dadTypes are what a pod legitimately sends from ::, to the node only
// (link-local multicast, never forwarded): duplicate address detection's
// neighbour solicitations (135) and the MLD reports of the groups it
// joins before it has an address (131, 143). Anything else from :: is
// spoofed (a pod that sent UDP from :: reached the node's services).
var dadTypes = []uint8{131, 135, 143}

// ICMPv6 neighbour discovery and router solicitation a pod needs to
// reach its host at all (types 133-136), and MLD reports (131, 143).
var ndTypes = []uint8{131, 133, 134, 135, 136, 143}

// dropRules are a counted drop with ID why/dir, logged to the drop log
// group (prefix "D why dir") when there is one.
func (d *Dataplane) dropRules(why, dir string) []Rule {
	var rs []Rule
	if d.cfg.DropLogGroup != 0 {
		rs = append(rs, Rule{Action: ActLog, LogGroup: d.cfg.DropLogGroup, LogRate: d.cfg.DropLogRate, LogPrefix: "D " + why + " " + dir})
	}
	return append(rs, Rule{ID: why + "/" + dir, Counter: true, Action: ActDrop})
}

func (d *Dataplane) addBase() {
	p := d.cfg.IfacePrefix
	prio := func(v int32) *nftables.ChainPriority { return nftables.ChainPriorityRef(nftables.ChainPriority(v)) }
	base := func(name string, h *nftables.ChainHook, pr int32, rules ...Rule) {
		d.addInternal(name, &hook{num: h, prio: prio(pr)}, rules)
	}
	established := []Rule{
		{CtState: expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED, Action: ActAccept},
		{CtState: expr.CtStateBitINVALID, Action: ActDrop},
	}
	drop := d.dropRules
	unknown := func(dir string) []Rule { return drop("unknown-iface", dir) }

	// A workload's packet whose source has no route back through its
	// interface is spoofed (another pod's address, the host's, anything
	// not routed to that pod): it is dropped on the prerouting hook
	// before connection tracking, so that it can neither match nor
	// refresh (nor, as an in-window RST, close) the real owner's
	// connection, and before the host answers it (ICMP errors of
	// forwarding). Counted as to-host when its destination is the node
	// itself (local, broadcast, multicast), else as egress.
	spoofed := func(to Rule) []Rule {
		host, fwd := to, to
		host.DstNotUnicast, host.Action, host.Target = true, ActJump, chainSpoofed+"to-host"
		fwd.Action, fwd.Target = ActJump, chainSpoofed+"egress"
		return []Rule{host, fwd}
	}
	// From ::, only DAD's and MLD's ICMPv6 to the node go on; the rest is
	// spoofed. (IPv6-only rules: the ip table leaves them out.)
	var check []Rule
	for _, t := range dadTypes {
		check = append(check, Rule{IPVersion: 6, InIface: p, Src: Side{Nets: unspecified}, Proto: 58, ICMP: &ICMPMatch{Type: t, Code: -1}, DstNotUnicast: true, Action: ActAccept})
	}
	check = append(check, spoofed(Rule{IPVersion: 6, InIface: p, Src: Side{Nets: unspecified}})...)
	// From IPv4's 0.0.0.0 likewise only a DHCP client's request to the
	// broadcast or local multicast (the only destinations the kernel
	// lets a zero source reach) and IGMP; the rest is spoofed (a pod's
	// UDP from 0.0.0.0 to the broadcast reached any of the node's
	// services, judged only by its egress policy).
	check = append(check,
		Rule{IPVersion: 4, InIface: p, Src: Side{Nets: zeroSource, Ports: []PortRange{{68, 68}}}, Proto: 17,
			Dst: Side{Nets: dhcpDests, Ports: []PortRange{{67, 67}}}, Action: ActAccept},
		Rule{IPVersion: 4, InIface: p, Src: Side{Nets: zeroSource}, Proto: 2, Dst: Side{Nets: ipv4Multicast}, Action: ActAccept})
	check = append(check, spoofed(Rule{IPVersion: 4, InIface: p, Src: Side{Nets: zeroSource}})...)
	check = append(check, spoofed(Rule{InIface: p, SrcNoRouteBack: true})...)
	// A local pod's address arriving on a tunnel or WireGuard device is
	// another node (or whoever can reach the node's VXLAN port)
	// posing as that pod: WireGuard's allowed IPs give a peer its whole
	// block, in which this node may have borrowed addresses for its own
	// pods, and the devices' rp_filter may be off.
	for _, t := range d.cfg.TunnelIfaces {
		check = append(check, Rule{InIface: t + "\x00", SrcViaIface: p, Action: ActJump, Target: chainSpoofed + "tunnel"})
	}
	d.addInternal(chainSpoofed+"egress", nil, drop("spoofed-src", "egress"))
	d.addInternal(chainSpoofed+"to-host", nil, drop("spoofed-src", "to-host"))
	d.addInternal(chainSpoofed+"tunnel", nil, drop("spoofed-src", "tunnel"))
	// Then what a pod sends inside a tunnel's encapsulation (encap.go).
	encap := func(dir string) Rule { return Rule{InIface: p, Action: ActJump, Target: chainEncap + dir} }
	d.encapPorts = []uint16{DefaultVXLANPort}
	for _, dir := range []string{"egress", "to-host"} {
		d.addInternal(chainEncapDrop+dir, nil, drop("wl-encap", dir))
		d.addInternal(chainEncap+dir, nil, encapRules(dir, d.encapPorts))
	}

	// Before conntrack (-200) and the host endpoints' raw chain (-300).
	base(chainSpoofCheck, nftables.ChainHookPrerouting, -310, check...)
	base(chainFwdEgress, nftables.ChainHookForward, 0, encap("egress"), Rule{InIface: p, Action: ActJump, Target: chainFromWL})
	base(chainFwdIngress, nftables.ChainHookForward, 1, Rule{OutIface: p, Action: ActJump, Target: chainToWL})
	base(chainInput, nftables.ChainHookInput, 0, encap("to-host"), Rule{InIface: p, Action: ActJump, Target: chainFromWLHost})

	fromWL := append(append([]Rule{}, established...), Rule{InIface: p, Action: ActDispatch, Target: FromWLIfaces})
	d.addInternal(chainFromWL, nil, append(fromWL, unknown("egress")...))
	toWL := append(append([]Rule{}, established...), Rule{OutIface: p, Action: ActDispatch, Target: ToWLIfaces})
	d.addInternal(chainToWL, nil, append(toWL, unknown("ingress")...))

	host := append([]Rule{}, established...)
	for _, t := range ndTypes {
		host = append(host, Rule{IPVersion: 6, Proto: 58, ICMP: &ICMPMatch{Type: t, Code: -1}, Action: ActAccept})
	}
	host = append(host, Rule{InIface: p, Action: ActDispatch, Target: FromWLIfaces})
	d.addInternal(chainFromWLHost, nil, append(host, unknown("to-host")...))
}

// addInternal adds a chain this package owns and callers may not set.
func (d *Dataplane) addInternal(name string, h *hook, rules []Rule) {
	keys := make([]string, len(rules))
	for i := range rules {
		keys[i] = rules[i].key()
	}
	d.chains[name] = &chainWant{rules: rules, keys: keys, hook: h}
	d.dirtyChains[name] = true
}

// isInternal reports whether callers may not set or delete the chain.
func isInternal(name string) bool {
	switch name {
	case chainFwdEgress, chainFwdIngress, chainInput, chainFromWL, chainToWL, chainFromWLHost, chainSpoofCheck:
		return true
	case chainSpoofed + "egress", chainSpoofed + "to-host", chainSpoofed + "tunnel":
		return true
	case chainEncap + "egress", chainEncap + "to-host", chainEncapDrop + "egress", chainEncapDrop + "to-host":
		return true
	}
	return isHostBase(name)
}

// ifnameKey pads an interface name to the 16 bytes of the ifname type.
func ifnameKey(name string) []byte {
	k := make([]byte, 16)
	copy(k, name)
	return k
}
