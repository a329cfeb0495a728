package datastore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/etcdserver"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// newTestClient starts a fresh embedded etcd and a client for it; both
// are closed when the test ends (client first).
func newTestClient(t *testing.T) (*Client, *etcdserver.Server) {
	t.Helper()
	s := etcdtest.Start(t)
	return connect(t, Config{Endpoints: s.Endpoints}), s
}

func connect(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newPool(name, cidr string) *api.IPPool {
	return &api.IPPool{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: name},
		Spec:     api.IPPoolSpec{CIDR: cidr},
	}
}

func newNode(name string, labels map[string]string) *api.Node {
	return &api.Node{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: name, Labels: labels},
		Spec:     api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.5/24"}},
	}
}

// wantErr fails unless errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: want %v, got %v", what, target, err)
	}
}

func newWEP(node, pod string) *api.WorkloadEndpoint {
	return &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(node, "k8s", "default", pod, "", "eth0")},
		Spec: api.WorkloadEndpointSpec{Node: node, ContainerID: "c-" + pod, InterfaceName: "cali" + pod,
			IPNetworks: []string{"10.1.0.1/32"}},
	}
}
