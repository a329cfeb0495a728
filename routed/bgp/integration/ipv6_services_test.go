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
	c, tor, a := torLab6(t)
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
	c.applyTorPeer(tor, api.BGPPeerSpec{})
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

// TestBirdBGPFilterIPv6: importV6/exportV6 rules with Calico's newer
// fields on an IPv6 session with BIRD 2: a community match accepts one
// of BIRD's two IPv6 routes (the rule after it rejects the rest); an In
// rule with prefixLength 100-122 adds a community and prepends an AS to
// the node's IPv6 block; a NotIn rule keeps the IPv6 service range in.
func TestBirdBGPFilterIPv6(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab6(t)
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol static upstream6 {
	ipv6;
	route 2001:db8:100::/48 blackhole { bgp_community.add((65000, 100)); };
	route 2001:db8:200::/48 blackhole;
}
filter to_nodes { if net ~ [2001:db8::/32+] then accept; reject; }
protocol bgp node_a6 {
	local %[2]s as 65000;
	neighbor %[3]s as 64512;
	ipv6 { import all; export filter to_nodes; };
}
`, tor.Addr, tor.Addr6, a.host.Addr6))
	lo, hi := int32(100), int32(122)
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		ServiceClusterIPs: []api.ServiceClusterIP{{CIDR: "fd00:96::/108"}}}})
	c.apply(&api.BGPFilter{Metadata: api.ObjectMeta{Name: "v6"}, Spec: api.BGPFilterSpec{
		ImportV6: []api.BGPFilterRule{
			{Action: "Accept", Communities: &api.BGPFilterCommunities{Values: []string{"65000:100"}}},
			{Action: "Reject"},
		},
		ExportV6: []api.BGPFilterRule{
			{Action: "Accept", MatchOperator: "In", CIDR: "fd00:65::/32", PrefixLength: &api.BGPFilterPrefixLength{Min: &lo, Max: &hi},
				Operations: []api.BGPFilterOperation{{AddCommunity: &api.BGPFilterAddCommunity{Value: "65001:66"}},
					{PrependASPath: &api.BGPFilterPrependASPath{Prefix: []api.ASNumber{65010}}}}},
			{Action: "Reject", MatchOperator: "NotIn", CIDR: "fd00:96::/32"},
		},
	}})
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor6"}, Spec: api.BGPPeerSpec{
		PeerIP: tor.Addr6.String(), ASNumber: 65000, Filters: []string{"v6"}}})

	a.waitRoutes("the community-matched IPv6 route", 30*time.Second, has("2001:db8:100::/48", tor.Addr6.String()))
	if r := a.sink().Routes; r["2001:db8:200::/48"] != "" {
		t.Errorf("the reject-the-rest rule let 2001:db8:200::/48 in: %v", r)
	}
	out := bird.WaitCtl(t, "show route fd00:65:1::/122 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "BGP.as_path: 64512 65010 64512") && strings.Contains(s, "(65001,66)")
	})
	t.Logf("BIRD's route to the IPv6 block:\n%s", out)
	bird.WaitCtl(t, "show route fd00:96::/108", 30*time.Second, func(s string) bool { return strings.Contains(s, "fd00:96::/108") })
}
