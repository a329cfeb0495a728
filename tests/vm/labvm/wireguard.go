package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/tests/lab"
)

const (
	wgDev = "wg.routed"
	// The pods' MTU is the uplink's less 20 with an IPIP pool, less 60
	// with IPv4 WireGuard on as well (felix.PodMTU, felix.WireguardMTU:
	// the smallest in use wins).
	ipipOverhead = 20
	wgOverhead   = 60
	tcpPort      = 7780
)

// wireguardPhase turns WireGuard on over the lab's IPIP pool with
// Calico's FelixConfiguration wireguardEnabled, applied with routedctl,
// and checks on the VM's kernel (its wireguard module, which routed's
// mode auto uses): every node routes
// every other node's blocks through wg.routed; cross-subnet pings and a
// TCP connection between pods move wg.routed's counters by at least the
// probes on both ends while tunl0's stay still; a pod created then gets
// the WireGuard MTU. The configuration deleted, the routes go back to
// tunl0, wg.routed goes, and the same pings move tunl0 again (the
// control that the counters above can see IPIP).
func wireguardPhase(p *prober, cross [][2]lab.NodeSpec) {
	ctx, l, fail := p.ctx, p.l, p.fail
	first := p.nodes[0]
	uplink, err := linkMTU(first.Name, "eth0")
	if err != nil {
		fail("wireguard: %v", err)
		return
	}
	old := p.byNode[first.Name][0]
	if mtu, err := linkMTU(old.NS, "eth0"); err != nil || mtu != uplink-ipipOverhead {
		fail("IPIP pool: pod %s MTU %d (%v), want %d (uplink %d less IPIP's %d)", old.Name, mtu, err, uplink-ipipOverhead, uplink, ipipOverhead)
		return
	}

	t0 := time.Now()
	if err := l.ApplyYAML(ctx, "wg-on.yaml", `apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {wireguardEnabled: true}
`); err != nil {
		fail("wireguard: apply FelixConfiguration: %v", err)
		return
	}
	if !p.waitRoutes("wireguardEnabled: true", func(n, peer lab.NodeSpec, line string) bool {
		return strings.Contains(line+" ", " dev "+wgDev+" ") && strings.Contains(line, "proto 82")
	}) {
		return
	}
	routed := time.Since(t0)
	if !p.waitPings("wireguardEnabled: true", cross) {
		return
	}
	logf("wireguardEnabled: true: every node routes the other nodes' blocks through %s after %.1fs, every cross-subnet pair answers after %.1fs",
		wgDev, routed.Seconds(), time.Since(t0).Seconds())
	fmt.Printf("%s wireguard on: routes through %s after %.1fs, pings answered after %.1fs\n", marker, wgDev, routed.Seconds(), time.Since(t0).Seconds())
	// The kernel's WireGuard (mode auto finds the module), not
	// wireguard-go in routed.
	if st, _ := l.NodeCtl(ctx, first.Name, "node", "status"); !strings.Contains(st, "device "+wgDev+" (kernel)") {
		fail("wireguard on: node status on %s does not show a kernel %s:\n%s", first.Name, wgDev, st)
	}

	// A TCP connection between pods on different subnets, inside the
	// counted window: it must not use tunl0 either.
	src, dst := p.byNode[cross[0][0].Name][0], p.byNode[cross[0][1].Name][0]
	tcp := func() error {
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		if err := lab.TCPListen(lctx, dst, tcpPort); err != nil {
			return err
		}
		ok, err := lab.TCPConnects(src, dst.IP, tcpPort, 5*time.Second*time.Duration(lab.WaitScale))
		if err != nil || !ok {
			return fmt.Errorf("TCP from %s to %s:%d did not connect (%v)", src.Name, dst.IP, tcpPort, err)
		}
		fmt.Printf("%s wireguard on: TCP %s (%s) -> %s:%d connected\n", marker, src.Name, src.Node, dst.IP, tcpPort)
		return nil
	}
	if delta, expect, ok := p.measure("wireguard cross-subnet", cross, tcp, "tunl0", wgDev); ok {
		for _, n := range p.nodes {
			w, t, want := delta[wgDev][n.Name], delta["tunl0"][n.Name], expect[n.Name]
			if w[0] < want || w[1] < want {
				fail("wireguard on: %s's %s rx +%d tx +%d, want at least +%d each", n.Name, wgDev, w[0], w[1], want)
			}
			if t[0] != 0 || t[1] != 0 {
				fail("wireguard on: %s's tunl0 rx +%d tx +%d, want +0 +0 (pod traffic must not leave through IPIP)", n.Name, t[0], t[1])
			}
		}
	}

	// A pod created now gets the WireGuard MTU, and reaches the other
	// subnet with it.
	np, err := l.AddPod(ctx, first.Name, "wgmtu")
	if err != nil {
		fail("wireguard on: add a pod on %s: %v", first.Name, err)
	} else {
		mtu, err := linkMTU(np.NS, "eth0")
		if err != nil || mtu != uplink-wgOverhead {
			fail("wireguard on: new pod %s MTU %d (%v), want %d (uplink %d less WireGuard's %d)", np.Name, mtu, err, uplink-wgOverhead, uplink, wgOverhead)
		} else {
			fmt.Printf("%s wireguard on: new pod MTU %d (IPIP-only pod %d, uplink %d)\n", marker, mtu, uplink-ipipOverhead, uplink)
		}
		to := p.byNode[cross[0][1].Name][0]
		if got, err := l.Ping(ctx, np, to.IP, 2); err != nil || got != 2 {
			fail("wireguard on: new pod %s -> %s (%s): %d/2 replies (%v)", np.Name, to.Name, to.IP, got, err)
		}
	}

	// Off again: back to tunl0.
	t0 = time.Now()
	if _, err := l.Ctl(ctx, "delete", "felixconfiguration", "default"); err != nil {
		fail("wireguard: delete FelixConfiguration: %v", err)
		return
	}
	if !p.waitRoutes("FelixConfiguration deleted", func(n, peer lab.NodeSpec, line string) bool {
		if n.Subnet == peer.Subnet {
			return strings.Contains(line+" ", " dev eth0 ") && strings.Contains(line, "proto 82")
		}
		return strings.Contains(line+" ", " dev tunl0 ") && strings.Contains(line, "proto 82") && strings.Contains(line, "onlink")
	}) {
		return
	}
	if !p.waitGone(wgDev) || !p.waitPings("FelixConfiguration deleted", cross) {
		return
	}
	fmt.Printf("%s wireguard off: routes through tunl0 and %s gone after %.1fs\n", marker, wgDev, time.Since(t0).Seconds())
	if delta, expect, ok := p.measure("wireguard off cross-subnet", cross, nil, "tunl0"); ok {
		for _, n := range p.nodes {
			d, want := delta["tunl0"][n.Name], expect[n.Name]
			if d[0] < want || d[1] < want {
				fail("wireguard off: %s's tunl0 rx +%d tx +%d, want at least +%d each", n.Name, d[0], d[1], want)
			}
		}
	}
}

// waitRoutes waits until every node's route to every other node's pod
// blocks satisfies ok, for at most 60 s (times the wait scale).
func (p *prober) waitRoutes(what string, ok func(n, peer lab.NodeSpec, line string) bool) bool {
	deadline := time.Now().Add(60 * time.Second * time.Duration(lab.WaitScale))
	for {
		var bad []string
		routes := map[string]string{}
		for _, n := range p.nodes {
			out, err := p.l.NodeRoutes(p.ctx, n.Name)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", n.Name, err))
				continue
			}
			routes[n.Name] = out
			for _, peer := range p.nodes {
				if peer.Name == n.Name {
					continue
				}
				for _, b := range blocks(p.byNode[peer.Name]) {
					if line := routeLine(out, b); !ok(n, peer, line) {
						bad = append(bad, fmt.Sprintf("%s: route to %s's block %s is %q", n.Name, peer.Name, b, line))
					}
				}
			}
		}
		if len(bad) == 0 {
			return true
		}
		if time.Now().After(deadline) || p.ctx.Err() != nil {
			for _, b := range bad {
				p.fail("%s: %s", what, b)
			}
			for n, r := range routes {
				logf("kernel routes on %s:\n%s", n, r)
			}
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitPings waits until the first pods of every pair answer one ping,
// for at most 30 s (times the wait scale): a WireGuard handshake may
// need a retry.
func (p *prober) waitPings(what string, pairs [][2]lab.NodeSpec) bool {
	deadline := time.Now().Add(30 * time.Second * time.Duration(lab.WaitScale))
	for _, pr := range pairs {
		from, to := p.byNode[pr[0].Name][0], p.byNode[pr[1].Name][0]
		for {
			got, err := p.l.Ping(p.ctx, from, to.IP, 1)
			if err == nil && got == 1 {
				break
			}
			if time.Now().After(deadline) || p.ctx.Err() != nil {
				p.fail("%s: %s (%s) cannot reach %s (%s) (%v)", what, from.Name, from.Node, to.Name, to.IP, err)
				return false
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return true
}

// waitGone waits until no node has dev, for at most 30 s (times the
// wait scale).
func (p *prober) waitGone(dev string) bool {
	deadline := time.Now().Add(30 * time.Second * time.Duration(lab.WaitScale))
	for {
		var left []string
		for _, n := range p.nodes {
			if _, _, err := devPackets(n.Name, dev); !errors.As(err, new(netlink.LinkNotFoundError)) {
				left = append(left, fmt.Sprintf("%s (%v)", n.Name, err))
			}
		}
		if len(left) == 0 {
			return true
		}
		if time.Now().After(deadline) || p.ctx.Err() != nil {
			p.fail("%s is still on %s", dev, strings.Join(left, ", "))
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// blocks are the /26 blocks of pods' addresses (the lab pool's block
// size), each once.
func blocks(pods []lab.Pod) []netip.Prefix {
	var out []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for _, p := range pods {
		b := netip.PrefixFrom(netip.MustParseAddr(p.IP), 26).Masked()
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

// linkMTU is a link's MTU in a named namespace.
func linkMTU(ns, dev string) (int, error) {
	link, err := nsLink(ns, dev)
	if err != nil {
		return 0, err
	}
	return link.Attrs().MTU, nil
}
