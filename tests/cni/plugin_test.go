package cni_test

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/kernel"
)

var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// TestAddCheckDelEveryVersion runs the full lifecycle at every spec
// version and checks what the kernel and etcd hold after each step.
func TestAddCheckDelEveryVersion(t *testing.T) {
	n := newNode(t)
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			l := confList(t, "routed-net", v, n.routedConf("10.77.0.0/24"))
			p := newPod(t, "web-"+strings.ReplaceAll(v, ".", ""))
			rt := p.rt()
			res, err := n.add(l, rt)
			if err != nil {
				t.Fatalf("ADD: %v\n%s", err, n.logTail())
			}
			if res.Version() != v {
				t.Errorf("result version %s, want %s", res.Version(), v)
			}
			raw, _ := json.Marshal(res)
			var generic map[string]any
			_ = json.Unmarshal(raw, &generic)
			if generic["cniVersion"] != v {
				t.Errorf("result JSON cniVersion %v, want %s: %s", generic["cniVersion"], v, raw)
			}
			cur, err := current.NewResultFromResult(res)
			if err != nil {
				t.Fatal(err)
			}
			hostVeth := kernel.HostDeviceName(p.namespace, p.name, p.containerID)
			ip := verifyAttachment(t, n, p, cur, hostVeth)

			if v != "0.3.0" && v != "0.3.1" {
				if err := n.check(l, rt); err != nil {
					t.Fatalf("CHECK: %v\n%s", err, n.logTail())
				}
				// CHECK must notice a removed host route and say so.
				if err := n.hostDo(func() error {
					return netlink.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK, Protocol: kernel.RouteProtocol})
				}); err != nil {
					t.Fatal(err)
				}
				err := n.check(l, rt)
				if err == nil || !strings.Contains(err.Error(), "host route "+ip.String()+"/32") {
					t.Fatalf("CHECK after removing the host route: %v, want a report naming the route", err)
				}
			}

			if err := n.del(l, rt); err != nil {
				t.Fatalf("DEL: %v\n%s", err, n.logTail())
			}
			n.assertClean(t, "routed-net", ip)
			if err := n.del(l, rt); err != nil {
				t.Fatalf("second DEL: %v", err)
			}
		})
	}
}

// verifyAttachment checks the result, kernel state on both sides and the
// WorkloadEndpoint; it returns the pod's address.
func verifyAttachment(t *testing.T, n *node, p *pod, res *current.Result, hostVeth string) net.IP {
	t.Helper()
	if len(res.Interfaces) < 2 || res.Interfaces[0].Name != hostVeth || res.Interfaces[0].Sandbox != "" ||
		res.Interfaces[1].Name != p.ifName || res.Interfaces[1].Sandbox != p.netns.Path() {
		t.Fatalf("result interfaces: %+v", res.Interfaces)
	}
	if res.Interfaces[0].Mac != "ee:ee:ee:ee:ee:ee" {
		t.Errorf("host MAC in result %s", res.Interfaces[0].Mac)
	}
	if len(res.IPs) != 1 || res.IPs[0].Interface == nil || *res.IPs[0].Interface != 1 {
		t.Fatalf("result ips: %+v", res.IPs)
	}
	if ones, _ := res.IPs[0].Address.Mask.Size(); ones != 32 {
		t.Errorf("address %s is not a /32", res.IPs[0].Address.String())
	}
	ip := res.IPs[0].Address.IP.To4()

	// Host side.
	_ = n.hostDo(func() error {
		link, err := netlink.LinkByName(hostVeth)
		if err != nil {
			t.Fatalf("host veth %s: %v", hostVeth, err)
		}
		if link.Attrs().HardwareAddr.String() != "ee:ee:ee:ee:ee:ee" || link.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("host veth: mac %s flags %v", link.Attrs().HardwareAddr, link.Attrs().Flags)
		}
		for path, want := range map[string]string{
			"/proc/sys/net/ipv4/conf/" + hostVeth + "/proxy_arp":    "1",
			"/proc/sys/net/ipv4/neigh/" + hostVeth + "/proxy_delay": "0",
			"/proc/sys/net/ipv4/conf/" + hostVeth + "/forwarding":   "1",
		} {
			b, err := os.ReadFile(path)
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s = %q (%v), want %s", path, b, err, want)
			}
		}
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
		found := false
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == ip.String()+"/32" && r.Scope == netlink.SCOPE_LINK && r.Protocol == kernel.RouteProtocol {
				found = true
			}
		}
		if !found {
			t.Errorf("host route %s/32 dev %s scope link proto %d missing: %v", ip, hostVeth, kernel.RouteProtocol, routes)
		}
		return nil
	})
	// Container side.
	_ = p.netns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(p.ifName)
		if err != nil {
			t.Fatalf("container %s: %v", p.ifName, err)
		}
		if link.Attrs().MTU != 1500 {
			t.Errorf("container MTU %d, want 1500", link.Attrs().MTU)
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != ip.String()+"/32" {
			t.Errorf("container addresses %v", addrs)
		}
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
		var gw, def bool
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == "169.254.1.1/32" && r.Scope == netlink.SCOPE_LINK {
				gw = true
			}
			if (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.String() == "169.254.1.1" {
				def = true
			}
		}
		if !gw || !def {
			t.Errorf("container routes %v: gateway route %v, default %v", routes, gw, def)
		}
		return nil
	})
	// Datastore.
	weps := n.endpoints()
	var found bool
	for _, w := range weps {
		if w.Spec.ContainerID != p.containerID {
			continue
		}
		found = true
		s := w.Spec
		if s.Node != n.name || s.Orchestrator != "k8s" || s.Namespace != p.namespace || s.Pod != p.name ||
			s.InterfaceName != hostVeth || s.ContainerInterface != p.ifName ||
			len(s.IPNetworks) != 1 || s.IPNetworks[0] != ip.String()+"/32" ||
			s.MAC != res.Interfaces[1].Mac || s.Handle != "routed-net."+p.containerID && !strings.HasSuffix(s.Handle, "."+p.containerID) {
			t.Errorf("endpoint %s: %+v", w.Metadata.Name, s)
		}
		// Calico's identity labels and the namespace's profile, which
		// policy selectors match.
		if l := w.Metadata.Labels; l["projectcalico.org/namespace"] != p.namespace || l["projectcalico.org/orchestrator"] != "k8s" ||
			len(s.Profiles) != 1 || s.Profiles[0] != "kns."+p.namespace {
			t.Errorf("endpoint %s identity: labels %v profiles %v", w.Metadata.Name, l, s.Profiles)
		}
	}
	if !found {
		t.Errorf("no WorkloadEndpoint for %s among %d", p.containerID, len(weps))
	}
	return ip
}

// TestTwoPodsPing wires two pods on one node and pings between them
// through the host: pod A -> caliA -> host route -> caliB -> pod B.
func TestTwoPodsPing(t *testing.T) {
	n := newNode(t)
	l := confList(t, "routed-net", "1.1.0", n.routedConf("10.78.0.0/24"))
	a, b := newPod(t, "ping-a"), newPod(t, "ping-b")
	ra := n.mustAdd(l, a.rt())
	rb := n.mustAdd(l, b.rt())
	ipA, ipB := ra.IPs[0].Address.IP.String(), rb.IPs[0].Address.IP.String()
	if out, err := inPod(a, "ping", "-c", "2", "-W", "2", ipB); err != nil {
		t.Fatalf("ping %s -> %s: %v\n%s", ipA, ipB, err, out)
	}
	if out, err := inPod(b, "ping", "-c", "1", "-W", "2", ipA); err != nil {
		t.Fatalf("ping %s -> %s: %v\n%s", ipB, ipA, err, out)
	}
	// The gateway's neighbour entry is the shared host MAC.
	out, _ := inPod(a, "ip", "neigh", "show", "169.254.1.1")
	if !strings.Contains(out, "ee:ee:ee:ee:ee:ee") {
		t.Errorf("pod A's neighbour entry for 169.254.1.1: %q", out)
	}
	for _, p := range []*pod{a, b} {
		if err := n.del(l, p.rt()); err != nil {
			t.Fatal(err)
		}
	}
	n.assertClean(t, "routed-net")
}

// TestChainedPortmapBandwidth runs the reference portmap and bandwidth
// plugins after routed-cni: both consume routed's prevResult (bandwidth
// finds the host veth through it) and CHECK/DEL walk the chain.
func TestChainedPortmapBandwidth(t *testing.T) {
	n := newNode(t)
	rc := n.routedConf("10.79.0.0/24")
	rc["capabilities"] = map[string]bool{"ips": true}
	l := confList(t, "routed-net", "1.1.0", rc,
		netconf{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "backend": "iptables"},
		netconf{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
	)
	p := newPod(t, "chained")
	rt := p.rt()
	rt.CapabilityArgs = map[string]any{
		"portMappings": []map[string]any{{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}},
		"bandwidth":    map[string]any{"ingressRate": 1000000, "ingressBurst": 100000, "egressRate": 2000000, "egressBurst": 200000},
		"ips":          []string{"10.79.0.42"},
	}
	res := n.mustAdd(l, rt)
	hostVeth := kernel.HostDeviceName(p.namespace, p.name, p.containerID)
	if got := res.IPs[0].Address.IP.String(); got != "10.79.0.42" {
		t.Errorf("fixed IP through runtimeConfig ips: got %s", got)
	}
	verifyAttachment(t, n, p, res, hostVeth)
	// bandwidth shapes the host veth (ingress) and an ifb device (egress).
	n.inHost(func() error {
		link, err := netlink.LinkByName(hostVeth)
		if err != nil {
			return err
		}
		qd, err := netlink.QdiscList(link)
		if err != nil {
			return err
		}
		var tbf bool
		for _, q := range qd {
			if q.Type() == "tbf" {
				tbf = true
			}
		}
		if !tbf {
			t.Errorf("bandwidth did not put a tbf qdisc on %s: %v", hostVeth, qd)
		}
		return nil
	})
	out, err := n.hostCmd("iptables-save")
	if err != nil || !strings.Contains(out, "18080") {
		t.Errorf("portmap rules for hostPort 18080 missing (%v):\n%s", err, out)
	}
	if err := n.check(l, rt); err != nil {
		t.Fatalf("CHECK chain: %v\n%s", err, n.logTail())
	}
	if err := n.del(l, rt); err != nil {
		t.Fatalf("DEL chain: %v", err)
	}
	n.assertClean(t, "routed-net", res.IPs[0].Address.IP)
	if out, _ := n.hostCmd("iptables-save"); strings.Contains(out, "18080") {
		t.Errorf("portmap rules left after DEL")
	}
}

// TestCalicoConflist: Calico's own conflist with only the plugin types
// changed (policy, kubernetes, mtu 0, log settings) works.
func TestCalicoConflist(t *testing.T) {
	n := newNode(t)
	kubeconfig := n.ipamDir + "/routed-kubeconfig"
	calico := `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "routed-cni",
      "log_level": "info",
      "log_file_path": "` + n.logFile + `",
      "datastore_type": "etcdv3",
      "etcd_endpoints": "` + n.hostEP + `",
      "etcd_key_file": "",
      "etcd_cert_file": "",
      "etcd_ca_cert_file": "",
      "nodename": "` + n.name + `",
      "mtu": 0,
      "ipam": {"type": "host-local", "subnet": "10.80.0.0/24", "dataDir": "` + n.ipamDir + `"},
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "` + kubeconfig + `"}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}`
	l, err := libcni.ConfListFromBytes([]byte(calico))
	if err != nil {
		t.Fatal(err)
	}
	p := newPod(t, "calico-style")
	res := n.mustAdd(l, p.rt())
	verifyAttachment(t, n, p, res, kernel.HostDeviceName(p.namespace, p.name, p.containerID))
	if err := n.del(l, p.rt()); err != nil {
		t.Fatal(err)
	}
	n.assertClean(t, "k8s-pod-network")

	// The Kubernetes datastore is Calico's, not routed's: a clear code 7.
	bad := strings.Replace(calico, `"etcdv3"`, `"kubernetes"`, 1)
	l, _ = libcni.ConfListFromBytes([]byte(bad))
	_, err = n.add(l, newPod(t, "kdd").rt())
	if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "datastore_type") {
		t.Fatalf("datastore_type kubernetes: %v (code %d), want code 7 naming datastore_type", err, cniCode(err))
	}
	n.assertClean(t, "k8s-pod-network")
}
