package cni_test

import (
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/kernel"
)

// TestRollback drives ADD into real failures at each stage and checks
// that nothing the ADD created survives: no veth, host route, IPAM
// allocation or WorkloadEndpoint, and that what existed before is kept.
func TestRollback(t *testing.T) {
	n := newNode(t)
	const network = "routed-net"

	t.Run("invalid config before anything is done", func(t *testing.T) {
		rc := n.routedConf("10.81.0.0/24")
		rc["mtu"] = -1
		_, err := n.add(confList(t, network, "1.1.0", rc), newPod(t, "badconf").rt())
		if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "mtu") {
			t.Fatalf("got %v (code %d), want code 7 about mtu", err, cniCode(err))
		}
		n.assertClean(t, network)
	})

	t.Run("host interface already exists", func(t *testing.T) {
		p := newPod(t, "clash")
		hostVeth := kernel.HostDeviceName(p.namespace, p.name, p.containerID)
		n.inHost(func() error {
			la := netlink.NewLinkAttrs()
			la.Name = hostVeth
			return netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "keepme0"})
		})
		_, err := n.add(confList(t, network, "1.1.0", n.routedConf("10.81.0.0/24")), p.rt())
		if cniCode(err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), hostVeth) {
			t.Fatalf("got %v (code %d), want code 4 naming %s", err, cniCode(err), hostVeth)
		}
		if !n.hostLinkExists(hostVeth) || !n.hostLinkExists("keepme0") {
			t.Fatal("rollback deleted an interface it did not create")
		}
		n.inHost(func() error { return netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "keepme0"}}) })
		n.assertClean(t, network)
	})

	t.Run("container interface already exists", func(t *testing.T) {
		p := newPod(t, "ifclash")
		p.ifName = "lo" // exists in every netns
		_, err := n.add(confList(t, network, "1.1.0", n.routedConf("10.81.0.0/24")), p.rt())
		if cniCode(err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), "lo already exists") {
			t.Fatalf("got %v (code %d), want code 4 about lo", err, cniCode(err))
		}
		n.assertClean(t, network)
	})

	t.Run("kernel rejects the MTU", func(t *testing.T) {
		rc := n.routedConf("10.81.0.0/24")
		rc["mtu"] = 60 // below the veth minimum of 68: netlink fails after IPAM
		_, err := n.add(confList(t, network, "1.1.0", rc), newPod(t, "tinymtu").rt())
		if err == nil || !strings.Contains(err.Error(), "MTU 60") {
			t.Fatalf("got %v, want a veth creation failure naming MTU 60", err)
		}
		n.assertClean(t, network)
	})

	t.Run("foreign host route for the address", func(t *testing.T) {
		// The address is fixed through the "ips" capability, and the host
		// already routes it elsewhere with a foreign protocol.
		ip := net.IPv4(10, 81, 0, 42).To4()
		foreign := &netlink.Route{Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK, Protocol: 4 /* static */}
		n.inHost(func() error {
			up, err := netlink.LinkByName("uplink0")
			if err != nil {
				return err
			}
			foreign.LinkIndex = up.Attrs().Index
			return netlink.RouteAdd(foreign)
		})
		rc := n.routedConf("10.81.0.0/24")
		rc["capabilities"] = map[string]bool{"ips": true}
		rt := newPod(t, "routeclash").rt()
		rt.CapabilityArgs = map[string]any{"ips": []string{ip.String()}}
		_, err := n.add(confList(t, network, "1.1.0", rc), rt)
		if err == nil || !strings.Contains(err.Error(), "does not own") {
			t.Fatalf("got %v, want an error about a route routed does not own", err)
		}
		routes := n.hostRoutes(ip)
		if len(routes) != 1 || routes[0].Protocol != 4 {
			t.Fatalf("foreign route was touched: %v", routes)
		}
		n.inHost(func() error { return netlink.RouteDel(foreign) })
		n.assertClean(t, network, ip)
	})

	t.Run("etcd unreachable at endpoint write", func(t *testing.T) {
		// host-local IPAM needs no etcd, so the endpoint write is the first
		// datastore access: veth, addresses and routes are all in place
		// when it fails, and all must go.
		rc := n.routedConf("10.81.0.0/24")
		rc["etcd_endpoints"] = "http://127.0.0.1:1"
		_, err := n.add(confList(t, network, "1.1.0", rc), newPod(t, "noetcd").rt())
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "etcd unreachable") {
			t.Fatalf("got %v (code %d), want code 11 saying etcd is unreachable", err, cniCode(err))
		}
		n.assertClean(t, network)
	})
}

// TestDelIdempotent: DEL succeeds whatever is already gone.
func TestDelIdempotent(t *testing.T) {
	n := newNode(t)
	l := confList(t, "routed-net", "1.1.0", n.routedConf("10.82.0.0/24"))

	t.Run("unknown container", func(t *testing.T) {
		if err := n.del(l, newPod(t, "never-added").rt()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("twice", func(t *testing.T) {
		p := newPod(t, "twice")
		n.mustAdd(l, p.rt())
		for i := 0; i < 2; i++ {
			if err := n.del(l, p.rt()); err != nil {
				t.Fatalf("DEL %d: %v", i, err)
			}
		}
		n.assertClean(t, "routed-net")
	})
	t.Run("without netns", func(t *testing.T) {
		p := newPod(t, "nonetns")
		n.mustAdd(l, p.rt())
		rt := p.rt()
		rt.NetNS = ""
		if err := n.del(l, rt); err != nil {
			t.Fatal(err)
		}
		n.assertClean(t, "routed-net")
	})
	t.Run("netns already deleted", func(t *testing.T) {
		p := newPod(t, "gone")
		n.mustAdd(l, p.rt())
		rt := p.rt()
		p.netns.Close()
		if err := testutils.UnmountNS(p.netns); err != nil {
			t.Fatal(err)
		}
		if err := n.del(l, rt); err != nil {
			t.Fatal(err)
		}
		n.assertClean(t, "routed-net")
	})
	t.Run("half-done ADD", func(t *testing.T) {
		// As if ADD died after the veth: no endpoint, no host route.
		p := newPod(t, "half")
		res := n.mustAdd(l, p.rt())
		ip := res.IPs[0].Address.IP
		for _, w := range n.endpoints() {
			if err := n.store.Delete(t.Context(), w.GetKind(), w.Metadata.Name, ""); err != nil {
				t.Fatal(err)
			}
		}
		n.inHost(func() error {
			return netlink.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK, Protocol: kernel.RouteProtocol})
		})
		if err := n.del(l, p.rt()); err != nil {
			t.Fatal(err)
		}
		n.assertClean(t, "routed-net", ip)
	})
	t.Run("etcd down, then back", func(t *testing.T) {
		p := newPod(t, "retry")
		n.mustAdd(l, p.rt())
		rc := n.routedConf("10.82.0.0/24")
		rc["etcd_endpoints"] = "http://127.0.0.1:1"
		err := n.del(confList(t, "routed-net", "1.1.0", rc), p.rt())
		if cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("DEL with etcd down: %v (code %d), want code 11", err, cniCode(err))
		}
		if len(n.hostLocalAllocations("routed-net")) != 1 {
			t.Fatal("address released while its endpoint still exists")
		}
		if err := n.del(l, p.rt()); err != nil {
			t.Fatalf("DEL once etcd is back: %v", err)
		}
		n.assertClean(t, "routed-net")
	})
}
