package integration

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestIPAMClaimToRoute wires the speakers to the real IPAM watch, as the
// daemon does: a pod address assigned on a claims a block, which reaches
// b; releasing it withdraws the route.
func TestIPAMClaimToRoute(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.apply(&api.IPPool{Metadata: api.ObjectMeta{Name: "pods"}, Spec: api.IPPoolSpec{CIDR: "10.66.0.0/16", BlockSize: 26}})
	withIPAM := func(cfg *childConfig) { cfg.IPAM = true }
	a := c.addNodeWith("a", 1, nil, withIPAM)
	b := c.addNodeWith("b", 2, nil, withIPAM)
	b.waitPeers("mesh up", 30*time.Second, allEstablished(a.host.Addr))

	ctx := context.Background()
	im := ipam.New(c.ds, ipam.WithEmptyBlockGrace(0))
	t0 := time.Now()
	ips, err := im.AutoAssign(ctx, ipam.AssignArgs{Node: "a", HandleID: "k8s-pod-network.c1", Attrs: ipam.Attributes{Namespace: "default", Pod: "p1"}})
	if err != nil || len(ips) != 1 {
		t.Fatalf("assign: %v %v", ips, err)
	}
	block := netip.PrefixFrom(ips[0], 26).Masked().String()
	b.waitRoutes("a's new block", 10*time.Second, has(block, a.host.Addr.String()))
	t.Logf("block %s claimed on a reached b's RouteSink %s after the claim returned", block, time.Since(t0).Round(time.Millisecond))

	if _, err := im.ReleaseByHandle(ctx, "k8s-pod-network.c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := im.ReleaseEmptyBlocks(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	b.waitRoutes("released block withdrawn", 10*time.Second, lacks(block))
}
