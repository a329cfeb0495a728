package cni_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/cniplugin/plugin"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
)

// enableIPv6Forwarding does in the test's host netns what felix does on
// a node with IPv6 pools.
func (n *node) enableIPv6Forwarding() {
	n.inHost(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644)
	})
}

// byFamily splits a result's addresses; it fails unless there is exactly
// one of each, both on interface 1 (the container end) as host prefixes.
func byFamily(t *testing.T, r *current.Result) (v4, v6 net.IP) {
	t.Helper()
	if len(r.IPs) != 2 {
		t.Fatalf("result has %d addresses, want one per family: %+v", len(r.IPs), r.IPs)
	}
	for _, ipc := range r.IPs {
		ones, bits := ipc.Address.Mask.Size()
		if ipc.Interface == nil || *ipc.Interface != 1 || ones != bits {
			t.Fatalf("address %s: interface %v, want a host prefix on interface 1 (%s)", ipc.Address.String(), ipc.Interface, r.Interfaces[1].Name)
		}
		if ipc.Address.IP.To4() != nil {
			v4 = ipc.Address.IP
		} else {
			v6 = ipc.Address.IP
		}
	}
	if v4 == nil || v6 == nil {
		t.Fatalf("result %+v: want one IPv4 and one IPv6 address", r.IPs)
	}
	return v4, v6
}

// TestDualStackPods: with an IPv4 and an IPv6 pool, each pod gets one
// address of each, at every spec version that carries several; the pods
// reach each other over both families through the host; CHECK verifies
// both families and notices a missing IPv6 route; DEL leaves nothing.
func TestDualStackPods(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "v4", "10.93.0.0/16", 26)
	n.createPool(t, "v6", "fd00:93::/48", 122)
	n.enableIPv6Forwarding()
	for _, v := range []string{"0.3.1", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			l := confList(t, "routed-net", v, n.routedIPAMConf(nil))
			a, b := newPod(t, "da"), newPod(t, "db")
			ra, rb := n.mustAdd(l, a.rt()), n.mustAdd(l, b.rt())
			a4, a6 := byFamily(t, ra)
			b4, b6 := byFamily(t, rb)
			if !strings.HasPrefix(a6.String(), "fd00:93:") || a6.Equal(b6) {
				t.Fatalf("IPv6 addresses %s, %s", a6, b6)
			}
			gw6 := false
			for _, r := range ra.Routes {
				gw6 = gw6 || (r.Dst.String() == "::/0" && r.GW.Equal(plugin.GatewayIP6))
			}
			if !gw6 {
				t.Errorf("result routes %v lack ::/0 via %s", ra.Routes, plugin.GatewayIP6)
			}
			held, err := ipam.New(n.store).IPsByHandle(context.Background(), "routed-net."+a.containerID)
			if err != nil || len(held) != 2 {
				t.Fatalf("handle holds %v (%v), want both addresses", held, err)
			}
			if rs := n.hostRoutes(a6); len(rs) != 1 || rs[0].Protocol != kernel.RouteProtocol {
				t.Fatalf("host routes to %s/128: %+v, want one of protocol %d", a6, rs, kernel.RouteProtocol)
			}
			if out, err := inPod(a, "ping", "-c", "1", "-W", "2", b4.String()); err != nil {
				t.Fatalf("ping %s: %v\n%s", b4, err, out)
			}
			if out, err := inPod(a, "ping", "-6", "-c", "1", "-W", "2", b6.String()); err != nil {
				t.Fatalf("ping -6 %s: %v\n%s", b6, err, out)
			}
			if out, err := inPod(b, "ping", "-6", "-c", "1", "-W", "2", a6.String()); err != nil {
				t.Fatalf("ping -6 %s: %v\n%s", a6, err, out)
			}
			if v != "0.3.1" {
				if err := n.check(l, a.rt()); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
				// CHECK sees a missing IPv6 host route.
				n.inHost(func() error {
					return netlink.RouteDel(&n.hostRoutes(b6)[0])
				})
				if err := n.check(l, b.rt()); err == nil || !strings.Contains(err.Error(), b6.String()+"/128") {
					t.Fatalf("CHECK after removing the route to %s: %v", b6, err)
				}
			}
			for _, p := range []*pod{a, b} {
				if err := n.del(l, p.rt()); err != nil {
					t.Fatal(err)
				}
			}
			n.assertClean(t, "none", a4, a6, b4, b6)
			if u := n.inUse(t); u != 0 {
				t.Errorf("%d addresses still allocated", u)
			}
		})
	}

	t.Run("fixed addresses", func(t *testing.T) {
		rc := n.routedIPAMConf(nil)
		rc["capabilities"] = map[string]bool{"ips": true}
		l := confList(t, "routed-net", "1.1.0", rc)
		p := newPod(t, "fixed6")
		rt := p.rt()
		rt.CapabilityArgs = map[string]any{"ips": []string{"10.93.200.7", "fd00:93:0:200::7"}}
		v4, v6 := byFamily(t, n.mustAdd(l, rt))
		if v4.String() != "10.93.200.7" || v6.String() != "fd00:93:0:200::7" {
			t.Errorf("fixed: got %s, %s", v4, v6)
		}
		// Two IPv6 addresses for one pod are refused before anything is made.
		q := newPod(t, "two6").rt()
		q.CapabilityArgs = map[string]any{"ips": []string{"fd00:93::8", "fd00:93::9"}}
		if _, err := n.add(l, q); err == nil || !strings.Contains(err.Error(), "one address per family") {
			t.Errorf("two IPv6 addresses: %v", err)
		}
		if err := n.del(l, rt); err != nil {
			t.Fatal(err)
		}
		n.assertCleanRoutedIPAM(t)
	})

	t.Run("IPv6 only", func(t *testing.T) {
		l := confList(t, "routed-net", "1.0.0", n.routedIPAMConf(map[string]any{"assign_ipv4": "false"}))
		p := newPod(t, "only6")
		r := n.mustAdd(l, p.rt())
		if len(r.IPs) != 1 || r.IPs[0].Address.IP.To4() != nil {
			t.Fatalf("IPv6-only pod got %+v", r.IPs)
		}
		out, _ := inPod(p, "ip", "-4", "addr", "show", "eth0")
		if strings.Contains(out, "inet ") {
			t.Errorf("IPv6-only pod has an IPv4 address:\n%s", out)
		}
		if err := n.check(l, p.rt()); err != nil {
			t.Fatalf("CHECK: %v", err)
		}
		if err := n.del(l, p.rt()); err != nil {
			t.Fatal(err)
		}
		n.assertCleanRoutedIPAM(t)
	})
}
