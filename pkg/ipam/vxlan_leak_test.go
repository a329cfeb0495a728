package ipam

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestCheckKeepsVXLANTunnelAddress: a node's VXLAN tunnel address (its
// VTEP, handle vxlan-tunnel-addr-<node>) named on its Node as
// ipv4VXLANTunnelAddr is in use, not leaked, next to an IPIP one, and so
// is its IPv6 VTEP (vxlan-v6-tunnel-addr-<node>, ipv6VXLANTunnelAddr).
func TestCheckKeepsVXLANTunnelAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.4.0.0/24", 26)
	e.pool("p6", "fd00:4::/120", 122)
	c := New(e.ds)
	ctx := ctxT(t)
	assign := func(handle string, family int) string {
		ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: handle, Family: family, Attrs: Attributes{Type: TypeTunnel}})
		if err != nil {
			t.Fatal(err)
		}
		return ips[0].String()
	}
	ipip, vxlan, vxlan6 := assign(TunnelHandle("n1"), 4), assign("vxlan-tunnel-addr-n1", 4), assign("vxlan-v6-tunnel-addr-n1", 6)
	e.apply(&api.Node{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: "n1"},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.1/24", IPv4IPIPTunnelAddr: ipip},
			IPv4VXLANTunnelAddr: vxlan, VXLANTunnelMACAddr: "66:da:0e:45:1c:2b",
			IPv6VXLANTunnelAddr: vxlan6, VXLANTunnelMACAddrV6: "66:da:0e:45:1c:2c"},
	})
	r, err := c.Check(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leaks) != 0 {
		t.Fatalf("leaks %+v, want none (n1's Node names %s, %s and %s)", r.Leaks, ipip, vxlan, vxlan6)
	}
}
