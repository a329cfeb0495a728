package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/tunneladdr"
)

// TestMigrateCalicoVXLANNodeStaysNoOp: a Calico node on an IPv4 and an
// IPv6 VXLAN pool (its spec.ipv4VXLANTunnelAddr and ipv6VXLANTunnelAddr,
// the MACs of Calico's vxlan.calico and vxlan-v6.calico, the IPv6 VTEP
// held by Calico's vxlanV6TunnelAddress allocation) is migrated; its
// routed then starts and records its tunnels (as every node does at
// start, tunneladdr.EnsureTunnelAddress). The node keeps Calico's tunnel
// addresses, and a second migration is still a no-op: the Node was
// written with routed's MACs, not Calico's (which the node replaced, so
// the re-run called the Node a conflict).
func TestMigrateCalicoVXLANNodeStaysNoOp(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	ds, err := datastore.New(datastore.Config{Endpoints: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	allocs := []string{"0"}
	var unalloc []string
	for i := 1; i < 64; i++ {
		allocs = append(allocs, "null")
		unalloc = append(unalloc, strconv.Itoa(i))
	}
	calico := map[string]string{
		"/calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":"10.245.0.0/16","vxlanMode":"Always","ipipMode":"Never","blockSize":26,"nodeSelector":"all()"}}`,
		"/calico/resources/v3/projectcalico.org/ippools/default-ipv6-ippool": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv6-ippool"},"spec":{"cidr":"fd00:245::/48","vxlanMode":"Always","ipipMode":"Never","blockSize":122,"nodeSelector":"all()"}}`,
		"/calico/resources/v3/projectcalico.org/nodes/vx-a": `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"vx-a"},"spec":{"bgp":{"ipv4Address":"10.0.5.11/24","ipv6Address":"fd00:5::11/64"},` +
			`"ipv4VXLANTunnelAddr":"10.245.1.0","vxlanTunnelMACAddr":"66:2a:9c:0e:4d:01","ipv6VXLANTunnelAddr":"fd00:245:0:1::","vxlanTunnelMACAddrV6":"66:2a:9c:0e:4d:02","orchRefs":[{"nodeName":"vx-a","orchestrator":"k8s"}]}}`,
		"/calico/ipam/v2/assignment/ipv4/block/10.245.1.0-26": `{"cidr":"10.245.1.0/26","affinity":"host:vx-a","strictAffinity":false,"allocations":[` + strings.Join(allocs, ",") + `],"unallocated":[` + strings.Join(unalloc, ",") +
			`],"attributes":[{"handle_id":"vxlan-tunnel-addr-vx-a","secondary":{"node":"vx-a","type":"vxlanTunnelAddress"}}],"deleted":false,"sequenceNumber":1,"sequenceNumberForAllocation":{"0":0}}`,
		"/calico/ipam/v2/host/vx-a/ipv4/block/10.245.1.0-26": `{"state":"confirmed","deleted":false}`,
		"/calico/ipam/v2/handle/vxlan-tunnel-addr-vx-a":      `{"handleID":"vxlan-tunnel-addr-vx-a","block":{"10.245.1.0/26":1},"deleted":false}`,
		"/calico/ipam/v2/assignment/ipv6/block/fd00:245:0:1::-122": `{"cidr":"fd00:245:0:1::/122","affinity":"host:vx-a","strictAffinity":false,"allocations":[` + strings.Join(allocs, ",") + `],"unallocated":[` + strings.Join(unalloc, ",") +
			`],"attributes":[{"handle_id":"vxlan-v6-tunnel-addr-vx-a","secondary":{"node":"vx-a","type":"vxlanV6TunnelAddress"}}],"deleted":false,"sequenceNumber":1,"sequenceNumberForAllocation":{"0":0}}`,
		"/calico/ipam/v2/host/vx-a/ipv6/block/fd00:245:0:1::-122": `{"state":"confirmed","deleted":false}`,
		"/calico/ipam/v2/handle/vxlan-v6-tunnel-addr-vx-a":        `{"handleID":"vxlan-v6-tunnel-addr-vx-a","block":{"fd00:245:0:1::/122":1},"deleted":false}`,
	}
	putKeys(t, ep, calico)
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "0 conflicts, 0 not carried over") {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errOut)
	}
	if err := tunneladdr.EnsureTunnelAddress(ctx, ds, ipam.New(ds), "vx-a"); err != nil {
		t.Fatal(err)
	}
	r, err := ds.Get(ctx, api.KindNode, "vx-a")
	if err != nil {
		t.Fatal(err)
	}
	if n := r.(*api.Node); n.Spec.IPv4VXLANTunnelAddr != "10.245.1.0" || n.Spec.VXLANTunnelMACAddr != api.VXLANMAC("vx-a").String() ||
		n.Spec.IPv6VXLANTunnelAddr != "fd00:245:0:1::" || n.Spec.VXLANTunnelMACAddrV6 != api.VXLANMACV6("vx-a").String() {
		t.Errorf("node after its start: %+v (want Calico's tunnel addresses 10.245.1.0 and fd00:245:0:1::, routed's MACs %s and %s)",
			n.Spec, api.VXLANMAC("vx-a"), api.VXLANMACV6("vx-a"))
	}
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "Migrated: 0 to create, 0 to update, 5 unchanged, 0 conflicts") {
		t.Fatalf("second migration after the node started is not a no-op: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "ipam", "check")
	if code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check: code %d\n%s%s", code, out, errOut)
	}
}
