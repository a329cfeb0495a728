package dstest

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Batch fills a test's datastore fast: resources encoded as the datastore
// stores them (datastore.Encode), put 100 to a transaction, unguarded.
// For benchmarks at a big cluster's size.
type Batch struct {
	tb  testing.TB
	ds  *datastore.Client
	ops []clientv3.Op
}

// NewBatch returns an empty Batch on ds.
func NewBatch(tb testing.TB, ds *datastore.Client) *Batch { return &Batch{tb: tb, ds: ds} }

// Put queues r, writing the queue when it holds 100.
func (b *Batch) Put(r api.Resource) {
	k, v, err := datastore.Encode(r)
	if err != nil {
		b.tb.Fatal(err)
	}
	if b.ops = append(b.ops, clientv3.OpPut(k, string(v))); len(b.ops) == 100 {
		b.Flush()
	}
}

// Flush writes what is queued.
func (b *Batch) Flush() {
	if len(b.ops) == 0 {
		return
	}
	if _, err := b.ds.Etcd().Txn(context.Background()).Then(b.ops...).Commit(); err != nil {
		b.tb.Fatal(err)
	}
	b.ops = b.ops[:0]
}

// PodEndpoint is pod number i's WorkloadEndpoint on node, shaped as
// routed-cni writes a Kubernetes pod's (identity labels, its namespace's
// and service account's profiles, named ports), with handle and ip.
func PodEndpoint(node string, i int, handle string, ip netip.Addr) *api.WorkloadEndpoint {
	ns, pod := fmt.Sprintf("ns-%04d", i%2000), fmt.Sprintf("app-%d-%08x-%05x", i%5, uint32(i)*2654435761, i)
	labels, profiles := api.PodIdentity(ns, "default", map[string]string{"app": fmt.Sprintf("app-%d", i%5), "tier": "backend", "pod-template-hash": "5d8f7c9b4"})
	tcp := api.ProtocolFromName(api.ProtocolTCP)
	cid := fmt.Sprintf("%064x", i)
	return &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(node, "k8s", ns, pod, "", "eth0"), Labels: labels},
		Spec: api.WorkloadEndpointSpec{Node: node, Orchestrator: "k8s", Namespace: ns, Pod: pod, ContainerID: cid, Endpoint: "eth0",
			InterfaceName: "cali" + cid[len(cid)-11:], ContainerInterface: "eth0", IPNetworks: []string{netip.PrefixFrom(ip, ip.BitLen()).String()},
			MAC: "ee:ee:ee:ee:ee:ee", Handle: handle, ServiceAccountName: "default", Profiles: profiles,
			Ports: []api.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}, {Name: "grpc", Protocol: tcp, Port: 9000}, {Name: "metrics", Protocol: tcp, Port: 9090}}},
	}
}
