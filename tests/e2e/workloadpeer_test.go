package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/tests/lab"
)

// TestWorkloadPeersWithItsNode: Calico's BGPPeer localWorkloadSelector,
// in both families on a dual-stack lab. A pod made through the real CNI
// plugin on n2 runs gobgpd (AS 65100) and dials the node at
// localWorkloadPeeringIPV4 and localWorkloadPeeringIPV6, which felix
// puts on the host side of the pod's interface once the pod's endpoint
// carries the selected label. Both sessions come up on both sides; the
// pod's routes outside the pools reach n2's kernel through the pod,
// while its routes inside the pools are refused by felix's import guard.
// Neither reaches another node: a ToR's route n2 learns afterwards
// arrives at the route reflector (n1) and at n3, and in that same view
// the pod's routes are absent (Calico exports a workload's routes to no
// other peer). Taking the label away tears both sessions down (gobgpd
// gets the Cease) and takes the addresses off the interface; labelled
// again, a new gobgpd peers again in both families. Deleting a second
// peering pod (its gobgpd still running) removes its sessions, routes
// and addresses.
func TestWorkloadPeersWithItsNode(t *testing.T) {
	l := startLabWith(t, func(topo *lab.Topology) { *topo = topo.WithDualStack() })
	ctx := context.Background()
	n1, n2, n3 := l.Topo.Nodes[0], l.Topo.Nodes[1], l.Topo.Nodes[2]
	const podAS, torAS = 65100, 65200
	const peering4, peering6 = "169.254.0.179", "fd12:3456:789a::1" // as Calico's own test
	pool4 := netip.MustParsePrefix(l.Topo.PoolCIDR).Addr().As4()
	pool6 := netip.MustParsePrefix(l.Topo.Pool6CIDR).Addr().As16()
	pool6[15] = 0x99
	fams := []wlFamily{{
		afi: "ipv4", inet: "inet ", peering: peering4, hostLen: "/32",
		outside: "203.0.113.0/24", marker: "198.51.100.0/24",
		inPool: netip.PrefixFrom(netip.AddrFrom4([4]byte{pool4[0], pool4[1], 250, 250}), 32).String(),
	}, {
		afi: "ipv6", inet: "inet6 ", peering: peering6, hostLen: "/128",
		outside: "2001:db8:203::/48", marker: "2001:db8:5100::/48",
		inPool: netip.PrefixFrom(netip.AddrFrom16(pool6), 128).String(),
	}}

	// A ToR on n2's subnet whose routes n2 passes on to its route
	// reflector: the positive event before checking what n1 and n3 lack.
	torNS, tor4, err := l.AddHost(ctx, "wltor", 78)
	if err != nil {
		t.Fatal(err)
	}
	tor6 := l.Topo.HostAddr6(78)
	cfg := fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: %d, nodeToNodeMeshEnabled: false, localWorkloadPeeringIPV4: %s, localWorkloadPeeringIPV6: "%s"}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: pod-routers}
spec: {localWorkloadSelector: "bgp == 'yes'", asNumber: %d}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: wltor}
spec: {node: %s, peerIP: %s, asNumber: %d}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: wltor6}
spec: {node: %s, peerIP: "%s", asNumber: %d}
`, l.Topo.NodeAS, peering4, peering6, podAS, n2.Name, tor4.Addr(), torAS, n2.Name, tor6.Addr(), torAS)
	if err := l.ApplyYAML(ctx, "workload-peer.yaml", cfg); err != nil {
		t.Fatal(err)
	}
	torBGP, err := l.StartGoBGP("wltor", torNS, tor4.Addr(), torAS,
		lab.GoBGPNeighbor{Addr: n2.Addr.Addr(), AS: l.Topo.NodeAS, ConnectRetry: 2 * time.Second},
		lab.GoBGPNeighbor{Addr: n2.Addr6.Addr(), AS: l.Topo.NodeAS, ConnectRetry: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(torBGP.Stop)

	// poll runs get until ok holds, for at most 60 s, and returns the
	// output ok held on.
	poll := func(what string, get func() (string, error), ok func(string) bool) string {
		t.Helper()
		var out string
		testenv.Eventually(t, 60*time.Second, 250*time.Millisecond, func() string {
			var err error
			if out, err = get(); err != nil || !ok(out) {
				return fmt.Sprintf("%s: %v\n%s", what, err, out)
			}
			return ""
		})
		return out
	}
	status := func(node string) func() (string, error) {
		return func() (string, error) { return l.NodeCtl(ctx, node, "node", "status") }
	}
	routes := func(node string) func() (string, error) {
		return func() (string, error) { return l.NodeRoutes(ctx, node) }
	}
	showRoute := func(node string) func() (string, error) {
		return func() (string, error) { return l.NodeCtl(ctx, node, "show", "route") }
	}
	hostAddrs := func(iface string) func() (string, error) {
		return func() (string, error) { return nsOut(ctx, n2.Name, "ip", "addr", "show", "dev", iface) }
	}
	hasPeering := func(s string) bool {
		for _, f := range fams {
			if !strings.Contains(s, f.inet+f.peering+f.hostLen) {
				return false
			}
		}
		return true
	}
	hasNoPeering := func(s string) bool {
		for _, f := range fams {
			if strings.Contains(s, f.inet+f.peering+f.hostLen) {
				return false
			}
		}
		return true
	}
	podIPs := func(p lab.Pod) []string { return []string{p.IP, p.IP6} }
	sessionsUp := func(p lab.Pod) func(string) bool {
		return func(s string) bool { return hasLine(s, p.IP, "Established") && hasLine(s, p.IP6, "Established") }
	}
	noSessions := func(p lab.Pod) func(string) bool {
		return func(s string) bool { return !strings.Contains(s, p.IP) && !strings.Contains(s, p.IP6) }
	}
	// startPodBGP runs gobgpd in the pod, peering in both families, and
	// waits for both sessions on both sides.
	startPodBGP := func(name string, p lab.Pod) *lab.GoBGP {
		t.Helper()
		var nbrs []lab.GoBGPNeighbor
		for _, f := range fams {
			nbrs = append(nbrs, lab.GoBGPNeighbor{Addr: netip.MustParseAddr(f.peering), AS: l.Topo.NodeAS, ConnectRetry: 2 * time.Second})
		}
		g, err := l.StartGoBGP(name, p.NS, netip.MustParseAddr(p.IP), podAS, nbrs...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		for _, n := range nbrs {
			if err := g.WaitEstablished(ctx, n.Addr, 60*time.Second); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, podBGPDiag(ctx, p, n.Addr, n2))
			}
		}
		poll(n2.Name+" lists "+p.Name+"'s sessions Established", status(n2.Name), sessionsUp(p))
		return g
	}
	announce := func(g *lab.GoBGP, afi, prefix string) {
		t.Helper()
		if out, err := g.Run(ctx, "global", "rib", "add", "-a", afi, prefix); err != nil {
			t.Fatalf("announce %s: %v: %s", prefix, err, out)
		}
	}

	pod := mustPod(t, l, n2.Name, "wlbgp")
	iface := kernel.HostDeviceName("default", pod.Name, "")
	wepName := api.WorkloadEndpointName(n2.Name, "k8s", "default", pod.Name, "", "eth0")
	label := func(v string) {
		t.Helper()
		if err := setEndpointLabel(ctx, l, wepName, "bgp", v); err != nil {
			t.Fatal(err)
		}
	}

	// Not selected yet: no address, no session.
	if out, err := hostAddrs(iface)(); err != nil || !hasNoPeering(out) {
		t.Fatalf("%s holds a peering address before the pod is selected: %v\n%s", iface, err, out)
	}
	label("yes")
	poll("the peering addresses on "+iface, hostAddrs(iface), hasPeering)

	// gobgpd's API listens on the pod's loopback, which CNI leaves down.
	if out, err := nsOut(ctx, pod.NS, "ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("lo up in %s: %v: %s", pod.NS, err, out)
	}
	g := startPodBGP("wlbgp", pod)
	for _, f := range fams {
		announce(g, f.afi, f.outside)
		announce(g, f.afi, f.inPool)
	}
	for i, f := range fams {
		via := podIPs(pod)[i]
		poll(n2.Name+" programs "+f.outside+" through the pod", routes(n2.Name), func(s string) bool {
			return hasLine(s, f.outside+" via "+via, "proto 82")
		})
		poll(n2.Name+" refuses "+f.inPool+" from the pod", showRoute(n2.Name), func(s string) bool {
			return hasLine(s, f.inPool, via, "filtered: workload-peer-inside-pools")
		})
		// ip route prints a /32 or /128 without its length.
		host := strings.TrimSuffix(f.inPool, f.hostLen) + " "
		if out, err := l.NodeRoutes(ctx, n2.Name); err != nil || slices.ContainsFunc(strings.Split(out, "\n"), func(r string) bool { return strings.HasPrefix(r, host) }) {
			t.Fatalf("%s: the pool route from the pod reached the kernel: %v\n%s", n2.Name, err, out)
		}
	}

	// The pod's routes stay on n2. A route n2 learns from the ToR after
	// it had the pod's reaches the route reflector and, through it, n3
	// (which refuse it: cluster sessions carry pool routes only); had n2
	// sent the pod's routes, they would have arrived first.
	for i, f := range fams {
		if err := torBGP.WaitEstablished(ctx, []netip.Addr{n2.Addr.Addr(), n2.Addr6.Addr()}[i], 60*time.Second); err != nil {
			t.Fatal(err)
		}
		announce(torBGP, f.afi, f.marker)
	}
	for _, n := range []lab.NodeSpec{n1, n3} {
		for _, f := range fams {
			out := poll(n.Name+" lists the ToR's "+f.marker+" heard through n2", showRoute(n.Name), func(s string) bool {
				return hasLine(s, f.marker, "filtered: cluster-peer-outside-pools")
			})
			for _, r := range []string{f.outside, f.inPool} {
				if strings.Contains(out, r) {
					t.Errorf("%s received the pod's %s beside %s:\n%s", n.Name, r, f.marker, out)
				}
			}
		}
	}

	// Unselected: the sessions and the addresses go, and the routes with them.
	label("no")
	poll("the peering addresses off "+iface, hostAddrs(iface), hasNoPeering)
	poll(n2.Name+" without the pod's sessions", status(n2.Name), noSessions(pod))
	poll(n2.Name+" without the pod's routes", routes(n2.Name), func(s string) bool {
		return !strings.Contains(s, fams[0].outside) && !strings.Contains(s, fams[1].outside)
	})

	// gobgpd got the Cease in both families (it saw the sessions go, not
	// just time out).
	if out, err := g.Run(ctx, "neighbor"); err != nil || hasLine(out, peering4, "Establ") || hasLine(out, peering6, "Establ") {
		t.Fatalf("the pod still has a session after the relabel: %v\n%s", err, out)
	}

	g.Stop()
	// Selected again: new sessions in both families (the pod kept its
	// route when the IPv4 address, its device's last, went).
	label("yes")
	poll("the peering addresses back on "+iface, hostAddrs(iface), hasPeering)
	startPodBGP("wlbgp-again", pod).Stop()
	label("no")

	// Deleting a peering pod while its gobgpd still runs: its sessions,
	// its routes and its addresses go with it.
	pod, iface = mustPod(t, l, n2.Name, "wlbgp2"), kernel.HostDeviceName("default", "wlbgp2", "")
	wepName = api.WorkloadEndpointName(n2.Name, "k8s", "default", pod.Name, "", "eth0")
	label("yes")
	poll("the peering addresses on "+iface, hostAddrs(iface), hasPeering)
	if out, err := nsOut(ctx, pod.NS, "ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("lo up in %s: %v: %s", pod.NS, err, out)
	}
	g = startPodBGP("wlbgp2", pod)
	for i, f := range fams {
		announce(g, f.afi, f.outside)
		via := podIPs(pod)[i]
		poll(n2.Name+" programs "+f.outside+" through the second pod", routes(n2.Name), func(s string) bool {
			return hasLine(s, f.outside+" via "+via, "proto 82")
		})
	}
	if err := l.DelPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	poll(n2.Name+" without the deleted pod's sessions", status(n2.Name), noSessions(pod))
	poll(n2.Name+" without the deleted pod's routes", routes(n2.Name), func(s string) bool {
		return !strings.Contains(s, fams[0].outside) && !strings.Contains(s, fams[1].outside)
	})
	poll(n2.Name+" without the peering addresses anywhere", func() (string, error) { return nsOut(ctx, n2.Name, "ip", "addr", "show") },
		func(s string) bool { return !strings.Contains(s, peering4) && !strings.Contains(s, peering6) })
}

// wlFamily is what TestWorkloadPeersWithItsNode checks in one family.
type wlFamily struct {
	afi     string // gobgp's -a
	inet    string // how ip addr show starts an address of the family
	peering string // localWorkloadPeeringIPV4/IPV6
	hostLen string // the peering address's prefix length on the device
	outside string // the pod's route outside the pools
	inPool  string // the pod's route inside a pool (refused)
	marker  string // the ToR's route n2 passes on
}

// podBGPDiag says why a pod's session with its node may not come up.
func podBGPDiag(ctx context.Context, p lab.Pod, peering netip.Addr, node lab.NodeSpec) string {
	iface := kernel.HostDeviceName("default", p.Name, "")
	podIP, flag := p.IP, "-4"
	if peering.Is6() {
		podIP, flag = p.IP6, "-6"
	}
	var diag []string
	for _, c := range [][]string{{p.NS, "ss", "-tn", "state", "syn-sent"}, {node.Name, "ss", "-tn", "sport", "= :179"},
		{node.Name, "ip", flag, "addr", "show", "dev", iface},
		{node.Name, "ip", flag, "route", "get", peering.String(), "from", podIP, "iif", iface},
		{p.NS, "ip", flag, "route"},
		{p.NS, "ping", flag, "-c", "2", "-W", "1", peering.String()},
		{node.Name, "sh", "-c", "nft list ruleset | grep -E 'counter packets [1-9]' | grep -iE 'drop|unknown' | head -20"}} {
		out, err := nsOut(ctx, c[0], c[1:]...)
		diag = append(diag, fmt.Sprintf("%v: %v\n%s", c, err, out))
	}
	return strings.Join(diag, "\n")
}

// setEndpointLabel sets one label on a WorkloadEndpoint as an
// orchestrator relabelling the pod would: read it, change it, write it.
func setEndpointLabel(ctx context.Context, l *lab.Lab, name, key, value string) error {
	out, err := l.Ctl(ctx, "get", "workloadendpoint", name, "-o", "json")
	if err != nil {
		return fmt.Errorf("get endpoint %s: %w: %s", name, err, out)
	}
	d, err := api.Decode([]byte(out))
	if err != nil || len(d.Resources) != 1 {
		return fmt.Errorf("decode endpoint %s: %v\n%s", name, err, out)
	}
	w, ok := d.Resources[0].(*api.WorkloadEndpoint)
	if !ok {
		return fmt.Errorf("endpoint %s: got a %T", name, d.Resources[0])
	}
	if w.Metadata.Labels == nil {
		w.Metadata.Labels = map[string]string{}
	}
	w.Metadata.Labels[key] = value
	var b bytes.Buffer
	if err := api.Encode(&b, []api.Resource{w}, "json", false); err != nil {
		return err
	}
	return l.ApplyYAML(ctx, "wep-"+name+".json", b.String())
}

// nsOut runs a command in a namespace and returns its output.
func nsOut(ctx context.Context, ns string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}
