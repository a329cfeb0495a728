package policy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// hostLab is a node with host processes serving TCP/UDP echo on ports
// 22, 80 and 8080, pods a and b (namespace prod, whose profile allows
// all), and two peers outside: x behind eth1 (net 66) and y behind eth2
// (net 67), each serving on 53, 80 and 8080; the node forwards between
// them.
type hostLab struct {
	*lab
	x, y *polab.Peer
}

const hostModel = `
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: projectcalico-default-allow}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`

func newHostLab(t *testing.T) *hostLab {
	t.Helper()
	l := &lab{t: t, node: polab.NewNode(t), pods: map[string]*polab.Pod{}, eps: map[string]policy.Endpoint{}}
	var err error
	l.m, err = policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: l.node.Fd}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.m.Close() })
	l.load(hostModel)
	for _, name := range []string{"a", "b"} {
		n := podNum[name]
		p := l.node.AddPod(t, "cali"+name, fmt.Sprintf("10.65.0.%d", n), fmt.Sprintf("fd00:65::%d", n))
		polab.Serve(t, p.NS, 8080)
		l.pods[name] = p
		if err := l.m.SetEndpoint(policy.Endpoint{Key: "node-k8s-prod-" + name + "-eth0", Iface: p.Iface, Local: true,
			Namespace: "prod", Profiles: []string{"kns.prod"}, IPs: p.Prefixes(), Labels: map[string]string{"app": name}}); err != nil {
			t.Fatal(err)
		}
	}
	h := &hostLab{lab: l, x: l.node.AddPeer(t, "eth1", 66), y: l.node.AddPeer(t, "eth2", 67)}
	for _, port := range []int{22, 80, 8080} {
		polab.Serve(t, l.node.NS, port)
	}
	for _, p := range []*polab.Peer{h.x, h.y} {
		for _, port := range []int{53, 80, 8080} {
			polab.Serve(t, p.NS, port)
		}
	}
	l.apply()
	// The first packets between the peers wait for neighbour discovery
	// (longer than a probe waits): warm the paths up first.
	for _, v6 := range []bool{false, true} {
		for _, p := range [][2]*polab.Peer{{h.x, h.y}, {h.y, h.x}} {
			probe := polab.Probe{Proto: "tcp", Dst: p[1].Addr(v6), Port: 80}
			nstest.Eventually(t, 5*time.Second, func() string {
				if ok, err := probe.Send(p[0].NS); err != nil || !ok {
					return fmt.Sprintf("%v from %s: not answered (%v)", probe, p[0].Name, err)
				}
				return ""
			})
		}
	}
	return h
}

// hep sets a HostEndpoint of this node from YAML's spec lines.
func (h *hostLab) hep(name, iface string, labels map[string]string, profiles ...string) {
	h.t.Helper()
	he := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: name, Labels: labels},
		Spec: api.HostEndpointSpec{Node: "node", InterfaceName: iface, Profiles: profiles}}
	if err := he.Validate(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.m.SetHostEndpoint(he, true, ""); err != nil {
		h.t.Fatal(err)
	}
	h.apply()
}

// hp is one probe of the host lab, sent over IPv4 and IPv6: from and to
// are "x", "y", "host" (x's and y's node address: to the node's own
// processes), "a", "b" (pods) or "lo" (the node to itself).
type hp struct {
	from, to string
	proto    string
	port     int
	want     bool
}

func (h *hostLab) addr(name string, v6 bool, from string) netip.Addr {
	switch name {
	case "x":
		return h.x.Addr(v6)
	case "y":
		return h.y.Addr(v6)
	case "host":
		if from == "y" {
			return h.y.NodeAddr(v6)
		}
		return h.x.NodeAddr(v6)
	case "lo":
		if v6 {
			return netip.IPv6Loopback()
		}
		return netip.MustParseAddr("127.0.0.1")
	}
	return h.pods[name].Addr(v6)
}

func (h *hostLab) src(name string) *nstest.NS {
	switch name {
	case "x":
		return h.x.NS
	case "y":
		return h.y.NS
	case "host", "lo":
		return h.node.NS
	}
	return h.pods[name].NS
}

func (h *hostLab) expect(why string, ps ...hp) {
	h.t.Helper()
	for _, p := range ps {
		for _, v6 := range []bool{false, true} {
			src := p.from
			dst := h.addr(p.to, v6, src)
			polab.Expect(h.t, h.src(src), polab.Probe{Proto: p.proto, Dst: dst, Port: p.port}, p.want,
				fmt.Sprintf("%s: %s->%s v6=%v", why, p.from, p.to, v6))
		}
	}
}

func hpass(from, to, proto string, port int) hp { return hp{from, to, proto, port, true} }
func hdrop(from, to, proto string, port int) hp { return hp{from, to, proto, port, false} }

// The policies of TestHostEndpointNamed: http in and 8080 out of the
// host on eth1; 8080 forwarded in through it.
const (
	edgeHTTP = `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: edge-http}
spec:
  selector: role == 'edge'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
  egress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`
	edgeForward = `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: edge-forward}
spec:
  selector: role == 'edge'
  applyOnForward: true
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`
)

// TestHostEndpointNamed: a named interface's endpoint polices traffic
// to and from the host on that interface only, denies without policy
// or profile but the failsafe ports, polices forwarded traffic only
// with applyOnForward policies, and a restarted Manager (the previous
// one gone as after kill -9) finds the host's policy still enforced
// and adopts it without a write.
func TestHostEndpointNamed(t *testing.T) {
	h := newHostLab(t)
	h.expect("no host endpoint", hpass("x", "host", "tcp", 80), hpass("host", "x", "tcp", 80), hpass("x", "y", "tcp", 80))

	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"})
	deny := []hp{
		hdrop("x", "host", "tcp", 80), hdrop("x", "host", "udp", 80), hdrop("host", "x", "tcp", 80),
		hpass("x", "host", "tcp", 22), hpass("host", "x", "udp", 53), // failsafe
		hpass("y", "host", "tcp", 80), hpass("host", "y", "tcp", 80), // eth2 is no host endpoint
		hpass("a", "host", "tcp", 80), hpass("host", "a", "tcp", 8080), // nor are the pods' interfaces
		hpass("x", "y", "tcp", 80), hpass("y", "x", "tcp", 80), hpass("x", "a", "tcp", 8080), // forwarded: no applyOnForward policy
		hpass("lo", "lo", "tcp", 80),
	}
	h.expect("eth1 without policy", deny...)

	h.load(edgeHTTP)
	h.apply()
	h.expect("eth1 allows http in, 8080 out",
		hpass("x", "host", "tcp", 80), hdrop("x", "host", "tcp", 8080), hdrop("x", "host", "udp", 80),
		hpass("host", "x", "tcp", 8080), hdrop("host", "x", "tcp", 80),
		hpass("x", "y", "tcp", 80), hpass("x", "y", "tcp", 8080), hpass("y", "x", "tcp", 80))

	h.load(edgeForward)
	h.apply()
	h.expect("eth1 with an applyOnForward ingress policy",
		hdrop("x", "y", "tcp", 80), hpass("x", "y", "tcp", 8080), hdrop("x", "a", "tcp", 80), hpass("x", "a", "tcp", 8080),
		hpass("y", "x", "tcp", 80), // leaving by eth1: no applyOnForward egress policy
		hpass("x", "host", "tcp", 8080), hpass("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22))

	// The process is gone (its sockets closed, as by kill -9): the
	// tables stay and keep enforcing; a new Manager given the same
	// model adopts them without writing.
	h.m.Close()
	h.expect("after the Manager is gone", hdrop("x", "y", "tcp", 80), hpass("x", "y", "tcp", 8080), hdrop("host", "x", "tcp", 80), hpass("x", "host", "tcp", 22))
	m2, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: h.node.Fd}})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m2 // closed by the lab's cleanup
	h.load(hostModel)
	for _, name := range []string{"a", "b"} {
		p := h.pods[name]
		if err := m2.SetEndpoint(policy.Endpoint{Key: "node-k8s-prod-" + name + "-eth0", Iface: p.Iface, Local: true,
			Namespace: "prod", Profiles: []string{"kns.prod"}, IPs: p.Prefixes(), Labels: map[string]string{"app": name}}); err != nil {
			t.Fatal(err)
		}
	}
	h.load(edgeHTTP)
	h.load(edgeForward)
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"})
	if w := m2.Writes(); w != 0 {
		t.Errorf("the restarted Manager wrote %d transactions, want 0", w)
	}

	// Deleting the endpoint opens the interface again.
	m2.DeleteHostEndpoint("node-eth1")
	h.apply()
	h.expect("endpoint deleted", hpass("x", "host", "tcp", 8080), hpass("host", "x", "tcp", 80), hpass("x", "y", "tcp", 80))
}

// TestHostEndpointWildcard: a "*" endpoint polices the host's own
// traffic on every interface, from local pods too (after their own
// egress policy), but not the host's traffic to its pods, nor lo; a
// profile that allows all makes it change nothing; applyOnForward
// policy polices forwarded traffic between host interfaces.
func TestHostEndpointWildcard(t *testing.T) {
	h := newHostLab(t)
	h.hep("node-all", "*", map[string]string{"host": "node"})
	h.expect("* without policy",
		hdrop("x", "host", "tcp", 80), hdrop("y", "host", "tcp", 80), hdrop("a", "host", "tcp", 80),
		hdrop("host", "x", "tcp", 80), hdrop("host", "y", "tcp", 8080),
		hpass("x", "host", "tcp", 22), hpass("a", "host", "tcp", 22), hpass("host", "y", "udp", 53), // failsafe
		hpass("host", "a", "tcp", 8080), hpass("a", "b", "tcp", 8080), hpass("lo", "lo", "tcp", 80),
		hpass("x", "y", "tcp", 80), hpass("x", "a", "tcp", 8080), hpass("a", "x", "tcp", 80))

	h.hep("node-all", "*", map[string]string{"host": "node"}, api.DefaultAllowProfile)
	h.expect("* with the default-allow profile",
		hpass("x", "host", "tcp", 80), hpass("a", "host", "tcp", 80), hpass("host", "x", "tcp", 80), hpass("x", "y", "tcp", 80))

	h.load(`
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: host-in}
spec:
  selector: host == 'node'
  applyOnForward: true
  ingress:
  - {action: Allow, protocol: TCP, destination: {ports: [8080]}}
  - {action: Allow, protocol: TCP, source: {selector: app == 'a'}, destination: {ports: [80]}}
`)
	h.apply()
	h.expect("* with an applyOnForward ingress policy",
		hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 8080), hpass("a", "host", "tcp", 80), hdrop("b", "host", "tcp", 80),
		hpass("host", "x", "tcp", 80), // no egress policy: the profile allows
		hdrop("x", "y", "tcp", 80), hpass("x", "y", "tcp", 8080), hdrop("y", "x", "tcp", 80),
		hpass("a", "x", "tcp", 80), // from a pod: its own policy (and no applyOnForward egress policy)
		hpass("host", "a", "tcp", 8080))
}

// TestHostEndpointPreDNAT: a preDNAT policy sees a NodePort's own port
// (a DNAT rule standing in for kube-proxy's), before DNAT changes it to
// the pod's, on traffic the node forwards to a local pod.
func TestHostEndpointPreDNAT(t *testing.T) {
	h := newHostLab(t)
	h.nodePort()
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"}, api.DefaultAllowProfile)
	h.expect("NodePort, no preDNAT policy", hpass("x", "host", "tcp", 30080), hpass("x", "a", "tcp", 8080))

	h.load(preDNATPolicy("Deny", 30080))
	h.apply()
	h.expect("preDNAT denies the NodePort", hdrop("x", "host", "tcp", 30080), hpass("x", "a", "tcp", 8080), hpass("x", "host", "tcp", 80))
	h.load(preDNATPolicy("Deny", 8080))
	h.apply()
	h.expect("preDNAT denies the pod's port", hpass("x", "host", "tcp", 30080), hdrop("x", "a", "tcp", 8080), hdrop("x", "host", "tcp", 8080))

	// A preDNAT Allow skips the endpoint's normal policy (Calico's): with
	// no profile, the endpoint denies all but what preDNAT allows.
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"})
	h.load(preDNATPolicy("Allow", 30080))
	h.apply()
	h.expect("preDNAT allows the NodePort past a deny-all endpoint",
		hpass("x", "host", "tcp", 30080), hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22), hpass("x", "a", "tcp", 8080))
}

// nodePort stands in for kube-proxy's NodePort: TCP to port 30080 of
// any of the node's addresses is DNATed to pod a's port 8080, over IPv4
// and IPv6.
func (h *hostLab) nodePort() {
	h.t.Helper()
	polab.Nft(h.t, h.node.NS, fmt.Sprintf(`
table ip nodeport {
	chain pre {
		type nat hook prerouting priority -100
		tcp dport 30080 dnat to %s:8080
	}
}
table ip6 nodeport {
	chain pre {
		type nat hook prerouting priority -100
		tcp dport 30080 dnat to [%s]:8080
	}
}
`, h.pods["a"].IPv4, h.pods["a"].IPv6))
}

// preDNATPolicy is the preDNAT policy nodeport of the endpoints
// labelled role=edge: one ingress rule, action (Allow, Deny) on TCP
// port.
func preDNATPolicy(action string, port int) string {
	return fmt.Sprintf(`
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: nodeport}
spec:
  selector: role == 'edge'
  preDNAT: true
  applyOnForward: true
  ingress: [{action: %s, protocol: TCP, destination: {ports: [%d]}}]
`, action, port)
}

// TestHostEndpointDoNotTrack: a doNotTrack policy's Allow lets traffic
// through with no conntrack entry, in both directions (the replies need
// their own rule), past an endpoint that otherwise denies; tracked
// traffic the normal policy allows has its entry.
func TestHostEndpointDoNotTrack(t *testing.T) {
	h := newHostLab(t)
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"})
	h.load(untrackedHTTP(true))
	h.load(`
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: tracked-8080}
spec:
  selector: role == 'edge'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`)
	h.apply()
	flushConntrack(t, h.node.NS)
	h.expect("doNotTrack allows http", hpass("x", "host", "tcp", 80), hpass("x", "host", "tcp", 8080), hdrop("x", "host", "udp", 80), hdrop("host", "x", "tcp", 80))
	flows := conntrackPorts(t, h.node.NS)
	for _, v := range []string{"ipv4", "ipv6"} {
		if flows[v+"/80"] > 0 {
			t.Errorf("%s: %d conntrack entries for the untracked port 80, want none", v, flows[v+"/80"])
		}
		if flows[v+"/8080"] == 0 {
			t.Errorf("%s: no conntrack entry for the tracked port 8080 (%v): the check would prove nothing", v, flows)
		}
	}

	// Without the egress rule the replies are not allowed: untracked,
	// they are not established either.
	h.load(untrackedHTTP(false))
	h.apply()
	h.expect("doNotTrack without the reply rule", hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22))
}

// untrackedHTTP is the doNotTrack policy untracked-http of the
// endpoints labelled role=edge: TCP 80 in and, with replies, out from
// source port 80 (its replies, which are not established: untracked).
func untrackedHTTP(replies bool) string {
	y := `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: untracked-http}
spec:
  selector: role == 'edge'
  doNotTrack: true
  applyOnForward: true
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
`
	if replies {
		y += "  egress: [{action: Allow, protocol: TCP, source: {ports: [80]}}]\n"
	}
	return y
}

// flushConntrack empties the namespace's conntrack table.
func flushConntrack(t *testing.T, n *nstest.NS) {
	t.Helper()
	h := conntrackHandle(t, n)
	if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		t.Fatal(err)
	}
}

// conntrackPorts counts the namespace's conntrack entries by family and
// original destination port ("ipv4/80").
func conntrackPorts(t *testing.T, n *nstest.NS) map[string]int {
	t.Helper()
	h := conntrackHandle(t, n)
	out := map[string]int{}
	for fam, name := range map[netlink.InetFamily]string{unix.AF_INET: "ipv4", unix.AF_INET6: "ipv6"} {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			out[fmt.Sprintf("%s/%d", name, f.Forward.DstPort)]++
		}
	}
	return out
}

func conntrackHandle(t *testing.T, n *nstest.NS) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// TestHostEndpointTunnelPeers: a "*" endpoint that denies everything
// still lets the other nodes' VXLAN packets through, in and out (the
// pod traffic they carry meets the pods' own policy), and only theirs,
// on the port felix configures: the same packets from an address that
// is no node's, or to another port, are dropped.
func TestHostEndpointTunnelPeers(t *testing.T) {
	h := newHostLab(t)
	h.node.VXLAN(t, h.x)
	a := h.pods["a"].IPv4
	mustRoute := func() {
		l, err := h.x.Handle.LinkByName("vxlan0")
		if err != nil {
			t.Fatal(err)
		}
		dst := netip.PrefixFrom(a, 32)
		if err := h.x.Handle.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixIPNet(dst),
			Gw: netip.MustParseAddr("10.71.0.1").AsSlice()}); err != nil {
			t.Fatal(err)
		}
	}
	mustRoute()
	overlay := polab.Probe{Proto: "tcp", Dst: a, Port: 8080}
	nstest.Eventually(t, 5*time.Second, func() string {
		if ok, err := overlay.Send(h.x.NS); err != nil || !ok {
			return fmt.Sprintf("x->a over VXLAN before any host endpoint: not answered (%v)", err)
		}
		return ""
	})
	h.hep("node-all", "*", map[string]string{"host": "node"})
	polab.Expect(t, h.x.NS, overlay, false, "x is no node: its VXLAN packets meet the deny-all endpoint")
	// x as a node, but the VXLAN port configured elsewhere (4790): the
	// lab's packets to 4789 stay policed.
	if !h.m.SetHostTunnelPeers([]netip.Addr{h.x.IPv4, netip.MustParseAddr("192.0.2.9")}, []uint16{4790}) {
		t.Fatal("tunnel peers reported unchanged")
	}
	h.apply()
	polab.Expect(t, h.x.NS, overlay, false, "x is a node, but 4789 is not the tunnels' port")
	if !h.m.SetHostTunnelPeers([]netip.Addr{h.x.IPv4, netip.MustParseAddr("192.0.2.9")}, []uint16{4789}) {
		t.Fatal("tunnel ports reported unchanged")
	}
	h.apply()
	polab.Expect(t, h.x.NS, overlay, true, "x is a node: its VXLAN packets pass, both ways")
	h.expect("the rest stays denied", hdrop("x", "host", "tcp", 80), hdrop("host", "x", "tcp", 80), hpass("x", "host", "tcp", 22))
	if h.m.SetHostTunnelPeers([]netip.Addr{netip.MustParseAddr("192.0.2.9"), h.x.IPv4}, []uint16{4789, 4789}) {
		t.Error("the same peers in another order reported as a change")
	}
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// killChildEnv names the node namespace TestHostEndpointKillChild
// programs when TestHostEndpointSurvivesKill runs it as a process.
const killChildEnv = "ROUTED_HEP_KILL_NETNS"

// TestHostEndpointSurvivesKill: a process that programmed a deny-all
// host endpoint is killed with SIGKILL; the host's policy stays in the
// kernel and keeps denying (and the failsafe port open).
func TestHostEndpointSurvivesKill(t *testing.T) {
	h := newHostLab(t)
	// The lab's Manager leaves (the tables stay); the child takes over.
	h.m.Close()
	var err error
	if h.m, err = policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: h.node.Fd}}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostEndpointKillChild$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+h.node.Path())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "HEP-READY" {
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- fmt.Errorf("the child ended without programming: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not program within 30 s")
	}
	h.expect("programmed by the child", hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22), hdrop("host", "x", "tcp", 80))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed", err)
	}
	h.expect("after kill -9", hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22), hdrop("host", "x", "tcp", 80), hpass("y", "host", "tcp", 80))
}

// TestHostEndpointKillChild is TestHostEndpointSurvivesKill's child:
// run by it (with killChildEnv set), it programs a deny-all endpoint
// on eth1 of the given namespace, says HEP-READY and waits to be
// killed. Run on its own it does nothing.
func TestHostEndpointKillChild(t *testing.T) {
	path := os.Getenv(killChildEnv)
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: int(f.Fd())}})
	if err != nil {
		t.Fatal(err)
	}
	he := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: "node-eth1"}, Spec: api.HostEndpointSpec{Node: "node", InterfaceName: "eth1"}}
	if err := m.SetHostEndpoint(he, true, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("HEP-READY")
	select {}
}
