package ipam

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// env is one test's embedded etcd and a datastore client on it.
type env struct {
	t  testing.TB
	ds *datastore.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := etcdtest.Start(t)
	return &env{t: t, ds: connect(t, srv.Endpoints)}
}

// poolEnv is how most tests start: a fresh env holding one pool (no
// options), and a client on it with opts.
func poolEnv(t testing.TB, name, cidr string, blockSize int, opts ...Option) (*env, *Client) {
	t.Helper()
	e := newEnv(t)
	e.pool(name, cidr, blockSize)
	return e, New(e.ds, opts...)
}

func connect(t testing.TB, endpoints []string) *datastore.Client {
	t.Helper()
	ds, err := datastore.New(datastore.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("datastore: %v", err)
	}
	t.Cleanup(func() { ds.Close() })
	return ds
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) apply(r api.Resource) {
	e.t.Helper()
	if _, err := e.ds.Apply(context.Background(), r); err != nil {
		e.t.Fatalf("apply %s %s: %v", r.GetKind(), r.Meta().Name, err)
	}
}

func (e *env) pool(name, cidr string, blockSize int, mod ...func(*api.IPPool)) *api.IPPool {
	e.t.Helper()
	p := &api.IPPool{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: name},
		Spec:     api.IPPoolSpec{CIDR: cidr, BlockSize: blockSize},
	}
	for _, m := range mod {
		m(p)
	}
	e.apply(p)
	return p
}

func (e *env) node(name string, labels map[string]string) {
	e.t.Helper()
	e.apply(&api.Node{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: name, Labels: labels},
	})
}

func (e *env) deleteNode(name string) {
	e.t.Helper()
	if err := e.ds.Delete(context.Background(), api.KindNode, name, ""); err != nil {
		e.t.Fatalf("delete node: %v", err)
	}
}

func (e *env) ipamConfig(spec api.IPAMConfigurationSpec) {
	e.t.Helper()
	e.apply(&api.IPAMConfiguration{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPAMConfiguration},
		Metadata: api.ObjectMeta{Name: "default"},
		Spec:     spec,
	})
}

// wep records a pod interface that uses handle, as the CNI plugin does
// after a successful ADD.
func (e *env) wep(node, pod, handle string, ips ...netip.Addr) string {
	e.t.Helper()
	var nets []string
	for _, ip := range ips {
		nets = append(nets, netip.PrefixFrom(ip, 32).String())
	}
	name := api.WorkloadEndpointName(node, "k8s", "default", pod, "", "eth0")
	e.apply(&api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: name},
		Spec: api.WorkloadEndpointSpec{Node: node, Namespace: "default", Pod: pod, ContainerID: handle,
			InterfaceName: "cali0", IPNetworks: nets, Handle: handle},
	})
	return name
}

// clock is a settable time source for tests of grace periods.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func assign(t testing.TB, c *Client, node, handle string, mod ...func(*AssignArgs)) netip.Addr {
	t.Helper()
	args := AssignArgs{Node: node, HandleID: handle, Attrs: Attributes{Namespace: "default", Pod: handle}}
	for _, m := range mod {
		m(&args)
	}
	ips, err := c.AutoAssign(ctxT(t), args)
	if err != nil {
		t.Fatalf("AutoAssign(%s, %s): %v", node, handle, err)
	}
	if len(ips) != 1 {
		t.Fatalf("AutoAssign(%s, %s) = %v, want one address", node, handle, ips)
	}
	return ips[0]
}

func mustVerify(t testing.TB, c *Client) {
	t.Helper()
	probs, err := c.Verify(ctxT(t))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	for _, p := range probs {
		t.Errorf("inconsistent: %s", p)
	}
}

func mustParse(s string) netip.Addr { return netip.MustParseAddr(s) }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// ipamKeysLeft lists IPAM's keys (records and whole blocks), but the
// layout marker, which stays.
func ipamKeysLeft(t *testing.T, ds *datastore.Client) []string {
	t.Helper()
	var out []string
	for _, prefix := range []string{ipamPrefix, blockPrefix} {
		resp, err := ds.Etcd().Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) != layoutKey {
				out = append(out, string(kv.Key))
			}
		}
	}
	return out
}
