package ipam

import (
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestCheckFindsTunnelAddressNoNodeUses: a tunnel address held for a
// node that exists but whose Node record names another tunnel address
// (or none) is leaked; the one the Node names is not.
func TestCheckFindsTunnelAddressNoNodeUses(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.3.0.0/24", 26)
	ctx := ctxT(t)
	tunnel := func(node string) string {
		ips, err := c.AutoAssign(ctx, AssignArgs{Node: node, HandleID: TunnelHandle(node), Attrs: Attributes{Type: TypeTunnel}})
		if err != nil {
			t.Fatal(err)
		}
		return ips[0].String()
	}
	node := func(name, tunnelAddr string) {
		e.apply(&api.Node{
			TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
			Metadata: api.ObjectMeta{Name: name},
			Spec:     api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.1/24", IPv4IPIPTunnelAddr: tunnelAddr}},
		})
	}
	used := tunnel("n1")
	node("n1", used)
	stale := tunnel("n2")
	node("n2", "") // IPIP turned off by hand; the address stayed allocated

	r, err := c.Check(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leaks) != 1 || r.Leaks[0].IP.String() != stale || !strings.Contains(r.Leaks[0].Reason, `node "n2" no longer uses`) {
		t.Fatalf("leaks %+v, want only %s (n2's, which its Node does not name)", r.Leaks, stale)
	}
	r, err = c.GC(ctx, 0)
	if err != nil || len(r.Errors) > 0 {
		t.Fatalf("GC: %v %v", err, r.Errors)
	}
	if got := leakAddrs(r); len(r.Released) != 1 || r.Released[0].String() != stale || !slices.Equal(got, r.Released) {
		t.Fatalf("GC released %v, want %s", r.Released, stale)
	}
	if _, err := c.IPInfo(ctx, mustParse(used)); err != nil {
		t.Fatalf("GC freed n1's tunnel address: %v", err)
	}
}
