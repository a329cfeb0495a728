package ipam

import (
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// TestCNIIdentityRunsIPAM: with etcd auth on and routed's roles, the CNI
// plugin's identity (routed-cni) claims a block, assigns and releases
// addresses: its role covers everything IPAM does, so least privilege
// does not break pod setup. The node identity does the same.
func TestCNIIdentityRunsIPAM(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	e := &env{t: t, ds: connect(t, srv.Endpoints)}
	e.pool("default", "10.246.0.0/24", 26)
	e.node("n1", nil)
	ctx := ctxT(t)
	pw := map[string]string{"root": "r00t", datastore.RoleCNI: "cni-pw", datastore.RoleNode: "node-pw"}
	if err := datastore.ApplyRoles(ctx, e.ds.Etcd(), nil, pw); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{datastore.RoleCNI, datastore.RoleNode} {
		// New authenticates (bcrypt in etcd) before it returns: give a
		// busy machine room; this test is about what the role may do.
		ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints, Username: user, Password: pw[user], DialTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ds.Close() })
		c := New(ds)
		handle := "k8s-pod-network." + user
		ip := assign(t, c, "n1", handle)
		if !pfx("10.246.0.0/24").Contains(ip) {
			t.Fatalf("%s: address %s outside the pool", user, ip)
		}
		if got, err := c.ReleaseByHandle(ctx, handle); err != nil || len(got) != 1 || got[0] != ip {
			t.Fatalf("%s: release %s: %v %v", user, handle, got, err)
		}
	}
}
