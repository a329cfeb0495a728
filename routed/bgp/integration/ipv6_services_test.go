package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// TestBirdLearnsIPv6ServiceRanges: IPv6 CIDRs in serviceClusterIPs,
// serviceExternalIPs and serviceLoadBalancerIPs are advertised over the
// IPv6 session to a real BIRD 2 with the node's IPv6 address as next hop
// (and never over the IPv4 session); an IPv6 prefixAdvertisement puts
// its standard and large communities on the IPv6 block inside it and
// nowhere else.
func TestBirdLearnsIPv6ServiceRanges(t *testing.T) {
	t.Parallel()
	c := newCluster6(t)
	tor := c.lab.AddHost("tor", 100)
	a := c.addNode("a", 1, nil, "10.65.1.0/26", "fd00:65:1::/122")
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol bgp node_a {
	local %[1]s as 65000;
	neighbor %[3]s as 64512;
	ipv4 { import all; export none; };
}
protocol bgp node_a6 {
	local %[2]s as 65000;
	neighbor %[4]s as 64512;
	ipv6 { import all; export none; };
}
`, tor.Addr, tor.Addr6, a.host.Addr, a.host.Addr6))
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		ServiceClusterIPs:      []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/108"}},
		ServiceExternalIPs:     []api.ServiceClusterIP{{CIDR: "2001:db8:e::/64"}},
		ServiceLoadBalancerIPs: []api.ServiceClusterIP{{CIDR: "2001:db8:1b::/64"}},
		Communities:            []api.Community{{Name: "pods6", Value: "65001:600"}},
		PrefixAdvertisements:   []api.PrefixAdvertisement{{CIDR: "fd00:65::/32", Communities: []string{"pods6", "65001:6:6"}}},
	}})
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{PeerIP: tor.Addr.String(), ASNumber: 65000}})
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor6"}, Spec: api.BGPPeerSpec{PeerIP: tor.Addr6.String(), ASNumber: 65000}})

	out := bird.WaitCtl(t, "show route protocol node_a6", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "fd00:96::/108") && strings.Contains(s, "2001:db8:e::/64") && strings.Contains(s, "2001:db8:1b::/64")
	})
	t.Logf("BIRD's IPv6 routes:\n%s", out)
	for _, svc := range []string{"fd00:96::/108", "2001:db8:e::/64", "2001:db8:1b::/64"} {
		r, _ := bird.Ctl("show route " + svc + " all")
		if !strings.Contains(r, "via "+v6(a)) || strings.Contains(r, "community") {
			t.Errorf("BIRD's route to %s (want via %s, no communities):\n%s", svc, v6(a), r)
		}
	}
	bird.WaitCtl(t, "show route protocol node_a", 30*time.Second, func(s string) bool { return strings.Contains(s, "10.96.0.0/12") })
	if v4routes, _ := bird.Ctl("show route protocol node_a"); strings.Contains(v4routes, "2001:db8") || strings.Contains(v4routes, "fd00:") {
		t.Errorf("IPv6 routes over the IPv4 session:\n%s", v4routes)
	}
	blk := bird.WaitCtl(t, "show route fd00:65:1::/122 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "(65001,600)") && strings.Contains(s, "(65001, 6, 6)")
	})
	t.Logf("BIRD's route to the IPv6 block:\n%s", blk)
	if r, _ := bird.Ctl("show route 10.65.1.0/26 all"); strings.Contains(r, "community") || !strings.Contains(r, "10.65.1.0/26") {
		t.Errorf("the IPv4 block (outside the IPv6 advertisement) is missing or got communities:\n%s", r)
	}
}
