package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
)

// TestPoolDisableBGPExport: Calico's IPPool disableBGPExport through the
// production wiring (the node feed, confd, the speaker). Node a holds a
// block in a public pool and one in a private pool; BIRD 2, an external
// eBGP peer, gets the public block only. Lifting the flag announces the
// private block, setting it again withdraws it.
func TestPoolDisableBGPExport(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tor := c.lab.AddHost("tor", 100)
	pool := func(name, cidr string, private bool) *api.IPPool {
		return &api.IPPool{Metadata: api.ObjectMeta{Name: name},
			Spec: api.IPPoolSpec{CIDR: cidr, BlockSize: 26, IPIPMode: api.EncapNever, VXLANMode: api.EncapNever,
				NodeSelector: "all()", DisableBGPExport: private}}
	}
	c.apply(pool("public", "10.65.0.0/16", false))
	c.apply(pool("private", "10.66.0.0/16", true))
	a := c.addNode("a", 1, nil, "10.65.1.0/26", "10.66.1.0/26")
	bird := torBird(t, tor, a)
	c.applyTorPeer(tor, api.BGPPeerSpec{Node: "a"})

	routes := func(s string) bool { return strings.Contains(s, "10.65.1.0/26") }
	got := bird.WaitCtl(t, "show route protocol node_a", 30*time.Second, routes)
	if strings.Contains(got, "10.66.1.0/26") {
		t.Fatalf("BIRD got the block of the disableBGPExport pool:\n%s", got)
	}

	c.apply(pool("private", "10.66.0.0/16", false))
	bird.WaitCtl(t, "show route protocol node_a", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "10.66.1.0/26") && strings.Contains(s, "10.65.1.0/26")
	})

	c.apply(pool("private", "10.66.0.0/16", true))
	got = bird.WaitCtl(t, "show route protocol node_a", 30*time.Second, func(s string) bool {
		return !strings.Contains(s, "10.66.1.0/26") && strings.Contains(s, "10.65.1.0/26")
	})
	t.Logf("BIRD's routes from a (private pool withdrawn again):\n%s", got)
}
