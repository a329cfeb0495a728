package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/tests/lab"
)

// TestWorkloadPeersWithItsNode: Calico's BGPPeer localWorkloadSelector.
// A pod made through the real CNI plugin on n2 runs gobgpd (AS 65100)
// and dials the node at localWorkloadPeeringIPV4, which felix puts on
// the host side of the pod's interface once the pod's endpoint carries
// the selected label. The session comes up on both sides; the pod's
// route outside the pools reaches n2's kernel through the pod, while
// its route inside the pool is refused by felix's import guard, and
// n3, which hears the route through the route reflector, refuses it too
// (cluster sessions carry pool routes only). Taking the label away tears
// the session down (gobgpd gets the Cease) and takes the address off the
// interface; labelled again, a new gobgpd peers again. Deleting a second peering pod (its gobgpd still running)
// removes its session, its route and its address.
func TestWorkloadPeersWithItsNode(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n2, n3 := l.Topo.Nodes[1], l.Topo.Nodes[2]
	const podAS, peering = 65100, "169.254.0.179"
	peeringIP := netip.MustParseAddr(peering)
	pod := mustPod(t, l, n2.Name, "wlbgp")
	iface := kernel.HostDeviceName("default", pod.Name, "")
	wepName := api.WorkloadEndpointName(n2.Name, "k8s", "default", pod.Name, "", "eth0")
	pool := netip.MustParsePrefix(l.Topo.PoolCIDR).Addr().As4()
	inPool := netip.PrefixFrom(netip.AddrFrom4([4]byte{pool[0], pool[1], 250, 250}), 32).String()
	const outside = "203.0.113.0/24"

	cfg := fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: %d, nodeToNodeMeshEnabled: false, localWorkloadPeeringIPV4: %s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: pod-routers}
spec: {localWorkloadSelector: "bgp == 'yes'", asNumber: %d}
`, l.Topo.NodeAS, peering, podAS)
	if err := l.ApplyYAML(ctx, "workload-peer.yaml", cfg); err != nil {
		t.Fatal(err)
	}
	label := func(v string) {
		t.Helper()
		if err := setEndpointLabel(ctx, l, wepName, "bgp", v); err != nil {
			t.Fatal(err)
		}
	}
	// poll runs get until ok holds, for at most 60 s.
	poll := func(what string, get func() (string, error), ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := get()
			if err == nil && ok(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s within 60s: %v\n%s", what, err, out)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	hostAddrs := func() (string, error) {
		return nsOut(ctx, n2.Name, "ip", "-4", "addr", "show", "dev", iface)
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
	hasPeering := func(s string) bool { return strings.Contains(s, "inet "+peering+"/32") }
	sessionUp := func(s string) bool { return hasLine(s, pod.IP, "Established") }

	// Not selected yet: no address, no session.
	if out, err := hostAddrs(); err != nil || hasPeering(out) {
		t.Fatalf("%s holds the peering address before the pod is selected: %v\n%s", iface, err, out)
	}
	label("yes")
	poll("the peering address on "+iface, hostAddrs, hasPeering)

	// gobgpd's API listens on the pod's loopback, which CNI leaves down.
	if out, err := nsOut(ctx, pod.NS, "ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("lo up in %s: %v: %s", pod.NS, err, out)
	}
	g, err := l.StartGoBGP("wlbgp", pod.NS, netip.MustParseAddr(pod.IP), podAS, lab.GoBGPNeighbor{Addr: peeringIP, AS: l.Topo.NodeAS, ConnectRetry: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	if err := g.WaitEstablished(ctx, peeringIP, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	poll(n2.Name+" lists the pod's session Established", status(n2.Name), sessionUp)

	for _, p := range []string{outside, inPool} {
		if out, err := g.Run(ctx, "global", "rib", "add", "-a", "ipv4", p); err != nil {
			t.Fatalf("announce %s: %v: %s", p, err, out)
		}
	}
	poll(n2.Name+" programs "+outside+" through the pod", routes(n2.Name), func(s string) bool {
		return hasLine(s, outside+" via "+pod.IP, "proto 82")
	})
	poll(n2.Name+" refuses "+inPool+" from the pod", showRoute(n2.Name), func(s string) bool {
		return hasLine(s, inPool, pod.IP, "filtered: workload-peer-inside-pools")
	})
	if out, err := l.NodeRoutes(ctx, n2.Name); err != nil || strings.Contains(out, inPool+" ") {
		t.Fatalf("%s: the pool route from the pod reached the kernel: %v\n%s", n2.Name, err, out)
	}
	// n3 hears it from the route reflector and keeps it out.
	poll(n3.Name+" refuses "+outside+" heard from its route reflector", showRoute(n3.Name), func(s string) bool {
		return hasLine(s, outside, "filtered: cluster-peer-outside-pools")
	})
	if out, err := l.NodeRoutes(ctx, n3.Name); err != nil || strings.Contains(out, outside) {
		t.Fatalf("%s programmed the pod's route: %v\n%s", n3.Name, err, out)
	}

	// Unselected: the session and the address go, and the route with them.
	label("no")
	poll("the peering address off "+iface, hostAddrs, func(s string) bool { return !hasPeering(s) })
	poll(n2.Name+" without the pod's session", status(n2.Name), func(s string) bool { return !strings.Contains(s, pod.IP) })
	poll(n2.Name+" without "+outside, routes(n2.Name), func(s string) bool { return !strings.Contains(s, outside) })

	// gobgpd got the Cease (it saw the session go, not just time out).
	if out, err := g.Run(ctx, "neighbor"); err != nil || hasLine(out, peering, "Establ") {
		t.Fatalf("the pod still has its session after the relabel: %v\n%s", err, out)
	}

	g.Stop()
	// Selected again: a new session (the pod kept its route when the
	// address, its device's last IPv4 address, went).
	label("yes")
	poll("the peering address back on "+iface, hostAddrs, hasPeering)
	g2, err := l.StartGoBGP("wlbgp-again", pod.NS, netip.MustParseAddr(pod.IP), podAS, lab.GoBGPNeighbor{Addr: peeringIP, AS: l.Topo.NodeAS, ConnectRetry: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.WaitEstablished(ctx, peeringIP, 60*time.Second); err != nil {
		diag := []string{err.Error()}
		for _, c := range [][]string{{pod.NS, "ss", "-tn", "state", "syn-sent"}, {n2.Name, "ss", "-tn", "sport", "= :179"}, {n2.Name, "ip", "-4", "addr", "show", "dev", iface},
			{n2.Name, "ip", "route", "get", peering, "from", pod.IP, "iif", iface},
			{pod.NS, "ping", "-c", "2", "-W", "1", peering}, {pod.NS, "ping", "-c", "2", "-W", "1", n2.Addr.Addr().String()},
			{n2.Name, "sh", "-c", "nft list ruleset | grep -E 'counter packets [1-9]' | grep -iE 'drop|unknown' | head -20"}} {
			out, err := nsOut(ctx, c[0], c[1:]...)
			diag = append(diag, fmt.Sprintf("%v: %v\n%s", c, err, out))
		}
		t.Fatalf("relabelled back in: no new session:\n%s", strings.Join(diag, "\n"))
	}
	poll(n2.Name+" lists the relabelled pod's session Established", status(n2.Name), sessionUp)
	g2.Stop()
	label("no")

	// Deleting a peering pod while its gobgpd still runs: its session,
	// its route and its address go with it.
	pod, iface = mustPod(t, l, n2.Name, "wlbgp2"), kernel.HostDeviceName("default", "wlbgp2", "")
	wepName = api.WorkloadEndpointName(n2.Name, "k8s", "default", pod.Name, "", "eth0")
	label("yes")
	poll("the peering address on "+iface, hostAddrs, hasPeering)
	if out, err := nsOut(ctx, pod.NS, "ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("lo up in %s: %v: %s", pod.NS, err, out)
	}
	g, err = l.StartGoBGP("wlbgp2", pod.NS, netip.MustParseAddr(pod.IP), podAS, lab.GoBGPNeighbor{Addr: peeringIP, AS: l.Topo.NodeAS, ConnectRetry: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	if err := g.WaitEstablished(ctx, peeringIP, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	poll(n2.Name+" lists the second pod's session Established", status(n2.Name), func(s string) bool { return hasLine(s, pod.IP, "Established") })
	if out, err := g.Run(ctx, "global", "rib", "add", "-a", "ipv4", outside); err != nil {
		t.Fatalf("announce %s: %v: %s", outside, err, out)
	}
	poll(n2.Name+" programs "+outside+" through the second pod", routes(n2.Name), func(s string) bool {
		return hasLine(s, outside+" via "+pod.IP, "proto 82")
	})
	if err := l.DelPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	poll(n2.Name+" without the deleted pod's session", status(n2.Name), func(s string) bool { return !strings.Contains(s, pod.IP) })
	poll(n2.Name+" without the deleted pod's route", routes(n2.Name), func(s string) bool { return !strings.Contains(s, outside) })
	poll(n2.Name+" without the peering address anywhere", func() (string, error) { return nsOut(ctx, n2.Name, "ip", "-4", "addr", "show") },
		func(s string) bool { return !strings.Contains(s, peering) })
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
