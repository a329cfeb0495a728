package datastore

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/pkg/api"
)

func denied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || status.Code(err) == codes.PermissionDenied
}

// TestEtcdRolesLeastPrivilege runs etcd with client-certificate auth and
// RBAC, one certificate per component (CN = etcd user), and checks each
// identity can do its job and nothing more: the CNI identity writes IPAM
// and endpoints but no pool, peer or node; a route reflector reads and
// writes only its own Node; the node daemon cannot write BGP peers or
// BGP configuration.
func TestEtcdRolesLeastPrivilege(t *testing.T) {
	t.Parallel()
	pki := testpki.New(t)
	s := startTLSEtcd(t, pki)
	identity := func(cn string) *Client {
		cert, k := pki.IssueClient(t, cn)
		return connect(t, Config{Endpoints: s.Endpoints, CACertFile: pki.CAFile, CertFile: cert, KeyFile: k})
	}
	ctx := testCtx(t)
	if err := ApplyRoles(ctx, identity("root").Etcd(), []string{"rr1"}, nil); err != nil {
		t.Fatal(err)
	}

	admin := identity(RoleAdmin)
	if _, err := admin.Create(ctx, newPool("p1", "10.60.0.0/16")); err != nil {
		t.Fatalf("admin creates a pool: %v", err)
	}
	if _, err := admin.Create(ctx, &api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{PeerIP: "10.0.0.1", ASNumber: 65001}}); err != nil {
		t.Fatalf("admin creates a BGPPeer: %v", err)
	}
	peer := func(name string) *api.BGPPeer {
		return &api.BGPPeer{Metadata: api.ObjectMeta{Name: name}, Spec: api.BGPPeerSpec{PeerIP: "10.0.0.9", ASNumber: 65009}}
	}

	t.Run("cni", func(t *testing.T) {
		c := identity(RoleCNI)
		if _, _, err := c.List(ctx, api.KindIPPool); err != nil {
			t.Fatalf("cni reads pools: %v", err)
		}
		if _, err := c.Etcd().Put(ctx, IPAMPrefix+"handles/k8s-pod-network.abc", "{}"); err != nil {
			t.Fatalf("cni writes an IPAM handle: %v", err)
		}
		if _, err := c.Etcd().Put(ctx, IPAMDataPrefix+"blocks/10.60.0.64-26", "{}"); err != nil {
			t.Fatalf("cni writes a whole block: %v", err)
		}
		if _, err := c.Create(ctx, newWEP("n1", "pod1")); err != nil {
			t.Fatalf("cni creates its endpoint: %v", err)
		}
		if _, err := c.Create(ctx, newPool("evil", "10.61.0.0/16")); !denied(err) {
			t.Fatalf("cni creating an IPPool: want permission denied, got %v", err)
		}
		if _, err := c.Create(ctx, peer("evil")); !denied(err) {
			t.Fatalf("cni creating a BGPPeer: want permission denied, got %v", err)
		}
		if _, err := c.Create(ctx, newNode("evil", nil)); !denied(err) {
			t.Fatalf("cni creating a Node: want permission denied, got %v", err)
		}
		if _, err := c.Etcd().Delete(ctx, ClusterInfoKey); !denied(err) {
			t.Fatalf("cni deleting the cluster identity: want permission denied, got %v", err)
		}
	})
	t.Run("node", func(t *testing.T) {
		c := identity(RoleNode)
		if _, err := c.Create(ctx, newNode("n1", nil)); err != nil {
			t.Fatalf("node registers: %v", err)
		}
		if _, err := c.InitClusterInfo(ctx); err != nil {
			t.Fatalf("node initialises the cluster identity: %v", err)
		}
		if _, err := c.Etcd().Put(ctx, IPAMPrefix+"blocks/10.60.0.0-26", "{}"); err != nil {
			t.Fatalf("node writes a block's summary: %v", err)
		}
		if _, err := c.Etcd().Put(ctx, IPAMDataPrefix+"blocks/10.60.0.0-26", "{}"); err != nil {
			t.Fatalf("node writes a whole block: %v", err)
		}
		if _, err := c.Etcd().Put(ctx, LeasesPrefix+"ipam-gc/x", "n1"); err != nil {
			t.Fatalf("node joins the GC election: %v", err)
		}
		if _, err := c.Create(ctx, peer("evil")); !denied(err) {
			t.Fatalf("node creating a BGPPeer: want permission denied, got %v", err)
		}
		bc := &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}}
		if _, err := c.Create(ctx, bc); !denied(err) {
			t.Fatalf("node creating BGPConfiguration: want permission denied, got %v", err)
		}
	})
	t.Run("controllers", func(t *testing.T) {
		c := identity(RoleControllers)
		// routed's nodes create the default tiers; policies need them.
		if _, err := admin.Create(ctx, api.DefaultTiers()[1]); err != nil {
			t.Fatalf("admin creates tier default: %v", err)
		}
		if _, err := c.Create(ctx, &api.Profile{Metadata: api.ObjectMeta{Name: "kns.ns1"}}); err != nil {
			t.Fatalf("controllers create a profile: %v", err)
		}
		np := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "knp.default.p1", Namespace: "ns1"}}
		if _, err := c.Create(ctx, np); err != nil {
			t.Fatalf("controllers create a NetworkPolicy: %v", err)
		}
		if _, err := c.Create(ctx, newWEP("n1", "pod9")); err != nil {
			t.Fatalf("controllers write an endpoint: %v", err)
		}
		if _, err := c.Create(ctx, &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "evil"}}); !denied(err) {
			t.Fatalf("controllers creating a GlobalNetworkPolicy: want permission denied, got %v", err)
		}
		if _, err := c.Create(ctx, &api.Tier{Metadata: api.ObjectMeta{Name: "evil"}}); !denied(err) {
			t.Fatalf("controllers creating a Tier: want permission denied, got %v", err)
		}
		if _, err := c.Create(ctx, newPool("evil2", "10.62.0.0/16")); !denied(err) {
			t.Fatalf("controllers creating an IPPool: want permission denied, got %v", err)
		}
		if _, err := c.Etcd().Put(ctx, IPAMPrefix+"handles/x", "{}"); !denied(err) {
			t.Fatalf("controllers writing IPAM: want permission denied, got %v", err)
		}
	})
	t.Run("route reflector", func(t *testing.T) {
		c := identity(RoleRouteReflector)
		if _, _, err := c.List(ctx, api.KindBGPPeer); err != nil {
			t.Fatalf("rr reads peers: %v", err)
		}
		// The node created the identity; the read-only reflector learns it.
		if ci, err := c.InitClusterInfo(ctx); err != nil || ci.GUID == "" {
			t.Fatalf("rr learns the cluster identity: %v %v", ci, err)
		}
		if _, err := c.Create(ctx, newNode("rr1", nil)); err != nil {
			t.Fatalf("rr registers its own Node: %v", err)
		}
		if _, err := c.Create(ctx, newNode("node7", nil)); !denied(err) {
			t.Fatalf("rr creating another Node: want permission denied, got %v", err)
		}
		if _, err := c.Etcd().Put(ctx, IPAMPrefix+"handles/x", "{}"); !denied(err) {
			t.Fatalf("rr writing IPAM: want permission denied, got %v", err)
		}
		if _, err := c.Create(ctx, peer("evil")); !denied(err) {
			t.Fatalf("rr creating a BGPPeer: want permission denied, got %v", err)
		}
	})
}

// TestPrintEtcdRoles: the printed etcdctl commands grant what Roles says,
// end by enabling auth, and never grant the CNI role BGP peers or pools.
func TestPrintEtcdRoles(t *testing.T) {
	var b bytes.Buffer
	if err := WriteEtcdctlRoles(&b, []string{"rr1"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"etcdctl role grant-permission routed-cni readwrite /routed/v1/ipam/ --prefix\n",
		"etcdctl role grant-permission routed-cni readwrite /routed/v1/workloadendpoints/ --prefix\n",
		"etcdctl role grant-permission routed-rr readwrite /routed/v1/nodes/rr1\n",
		"etcdctl user add routed-node --no-password\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "etcdctl auth enable\n") {
		t.Errorf("does not end by enabling auth:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "routed-cni readwrite") && (strings.Contains(line, "ippools") || strings.Contains(line, "bgppeers") || line == "etcdctl role grant-permission routed-cni readwrite /routed/v1/ --prefix") {
			t.Errorf("cni role writes too much: %q", line)
		}
	}
}
