package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// torLab is what most ToR tests start from: a cluster, its lab host
// "tor" (index 100), and node a holding block 10.65.1.0/26.
func torLab(t *testing.T) (*cluster, *bgptest.Host, *node) {
	t.Helper()
	return withTor(newCluster(t), "10.65.1.0/26")
}

// torLab6 is torLab on a dual-stack lab (newCluster6), node a holding
// blocks 10.65.1.0/26 and fd00:65:1::/122.
func torLab6(t *testing.T) (*cluster, *bgptest.Host, *node) {
	t.Helper()
	return withTor(newCluster6(t), "10.65.1.0/26", "fd00:65:1::/122")
}

func withTor(c *cluster, blocks ...string) (*cluster, *bgptest.Host, *node) {
	c.t.Helper()
	tor := c.lab.AddHost("tor", 100)
	return c, tor, c.addNode("a", 1, nil, blocks...)
}

// torBird runs BIRD 2 on tor as node a's eBGP top-of-rack router (AS
// 65000; a in AS 64512, one IPv4 session named node_a). It takes every
// route a sends, and sends a the static routes given: each a BIRD route
// statement after "route" ("192.168.100.0/24 blackhole", with an
// attribute block where a test needs one), all within 192.168.0.0/16.
// With none it sends nothing.
func torBird(t *testing.T, tor *bgptest.Host, a *node, routes ...string) *bgptest.Bird {
	t.Helper()
	var static, export string
	if len(routes) == 0 {
		export = "none"
	} else {
		static = "protocol static upstream {\n\tipv4;\n\troute " + strings.Join(routes, ";\n\troute ") + ";\n}\n" +
			"filter to_nodes { if net ~ [192.168.0.0/16+] then accept; reject; }\n"
		export = "filter to_nodes"
	}
	return bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
%[3]sprotocol bgp node_a {
	local %[1]s as 65000;
	neighbor %[2]s as 64512;
	ipv4 { import all; export %[4]s; };
}
`, tor.Addr, a.host.Addr, static, export))
}

// applyTorPeer applies the BGPPeer "tor": the ToR at tor's IPv4 address
// in AS 65000, with the rest of spec as given.
func (c *cluster) applyTorPeer(tor *bgptest.Host, spec api.BGPPeerSpec) {
	spec.PeerIP, spec.ASNumber = tor.Addr.String(), 65000
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: spec})
}
