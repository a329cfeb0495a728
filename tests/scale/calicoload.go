package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/routed/controllers"
)

// load writes the cluster in Calico's etcdv3 format: what `scale big`'s
// load writes (bigrun.load), from the same generator, with Calico's IPAM
// blocks and affinities instead of routed's (no handles: felix does not
// read them), and felix's own node with its pods.
func (r *cfxRun) load(ctx context.Context) error {
	sh := &r.f.sh
	ld := &loader{ds: r.ds, workers: r.f.workers, seed: r.f.seed}
	start := time.Now()
	if err := loadStep("cluster information, felix configuration, pool, tiers", func() error {
		kv := map[string]string{}
		calicoCluster(kv, sh.pool, sh.blockBits)
		return ld.putKVs(ctx, kv)
	}); err != nil {
		return err
	}
	if err := loadStep(fmt.Sprintf("%d namespaces' profiles and default's", sh.namespaces), func() error {
		batches := (sh.namespaces + txnOps - 1) / txnOps
		return ld.putAllKVs(ctx, batches, func(b int, kv map[string]string) error {
			for i := b * txnOps; i < min(sh.namespaces, (b+1)*txnOps); i++ {
				if err := calicoResources(kv, namespaceObjects(i)...); err != nil {
					return err
				}
			}
			if b > 0 {
				return nil
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}}}
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
			return calicoResources(kv, controllers.NamespaceProfile(ns), controllers.ServiceAccountProfile(sa))
		})
	}); err != nil {
		return err
	}
	blocks := freeBlocks(sh.pool, sh.blockBits, nil)
	if err := loadStep(fmt.Sprintf("felix's node and its %d pods", sh.realPods), func() error {
		kv := map[string]string{}
		pods, err := r.felixPods(kv, blocks[0])
		if err != nil {
			return err
		}
		calicoBlock(kv, cfxNode, blocks[0], pods)
		return ld.putKVs(ctx, kv)
	}); err != nil {
		return err
	}
	if err := loadStep(fmt.Sprintf("%d simulated nodes: Node, blocks and affinities, %d pods' endpoints", sh.simNodes(), sh.simPods()), func() error {
		return r.simNodes(ctx, ld, blocks[1:])
	}); err != nil {
		return err
	}
	if err := loadStep(fmt.Sprintf("%d network sets", sh.netsets), func() error {
		return ld.putAllKVs(ctx, (sh.netsets+txnOps-1)/txnOps, func(b int, kv map[string]string) error {
			for i := b * txnOps; i < min(sh.netsets, (b+1)*txnOps); i++ {
				if err := calicoResources(kv, simNetworkSet(i, sh.namespaces)); err != nil {
					return err
				}
			}
			return nil
		})
	}); err != nil {
		return err
	}
	pols := (&bigRun{sh: sh}).policies()
	if err := loadStep(fmt.Sprintf("%d policies", len(pols)), func() error {
		kv := map[string]string{}
		if err := calicoResources(kv, pols...); err != nil {
			return err
		}
		return ld.putKVs(ctx, kv)
	}); err != nil {
		return err
	}
	keys, err := r.ds.Etcd().Get(ctx, "/calico/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Printf("==> datastore: %d keys under /calico/ written in %s (%d transactions, %.0f keys/s)\n",
		keys.Count, took.Round(time.Second), ld.txns.Load(), float64(keys.Count)/took.Seconds())
	return nil
}

// felixPods are felix's node's pods (namespace default, as scale big's
// real pods: its local policies and the tracking policy select them),
// in block b; their endpoints go into kv.
func (r *cfxRun) felixPods(kv map[string]string, b netip.Prefix) ([]*simPod, error) {
	node := &api.Node{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: cfxNode, Labels: map[string]string{"kubernetes.io/hostname": cfxNode, "kubernetes.io/os": "linux"}},
		Spec:     api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.99.0.2/24"}},
	}
	if err := calicoResources(kv, node); err != nil {
		return nil, err
	}
	var pods []*simPod
	for j := 0; j < r.f.sh.realPods; j++ {
		p := &simPod{node: cfxNode, name: fmt.Sprintf("local-%d", j), cid: fmt.Sprintf("%064x", j+1), addr: addrAt(b, j+1)}
		dev := kernel.HostDeviceName("default", p.name, "")
		labels, profiles := api.PodIdentity("default", "default", map[string]string{"run": p.name})
		wep := &api.WorkloadEndpoint{
			TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
			Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(cfxNode, "k8s", "default", p.name, "", "eth0"), Labels: labels},
			Spec: api.WorkloadEndpointSpec{Node: cfxNode, Orchestrator: "k8s", Namespace: "default", Pod: p.name,
				ContainerID: p.cid, Endpoint: "eth0", InterfaceName: dev, ContainerInterface: "eth0",
				IPNetworks: []string{netip.PrefixFrom(p.addr, 32).String()}, MAC: "ee:ee:ee:ee:ee:ee",
				ServiceAccountName: "default", Profiles: profiles},
		}
		if err := calicoResources(kv, wep); err != nil {
			return nil, err
		}
		r.ifaces = append(r.ifaces, dev)
		pods = append(pods, p)
	}
	return pods, nil
}

// simNodes writes every simulated node as `scale big`'s loader does
// (loader.simNodes: the same pods, addresses and blocks), in Calico's
// format.
func (r *cfxRun) simNodes(ctx context.Context, ld *loader, blocks []netip.Prefix) error {
	sh := &r.f.sh
	bsize := 1 << (32 - sh.blockBits)
	next := 0
	first := make([]int, sh.simNodes())
	for i := range first {
		first[i] = next
		next += (sh.podsOn(i) + bsize - 1) / bsize
	}
	if next > len(blocks) {
		return fmt.Errorf("the pool has %d free blocks; the nodes' pods need %d", len(blocks), next)
	}
	r.pods = make([][]*simPod, sh.simNodes())
	return ld.putAllKVs(ctx, sh.simNodes(), func(i int, kv map[string]string) error {
		name := simNodeName(i)
		if err := calicoResources(kv, simNode(i, sh.simNodeAddr(i))); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(ld.seed, uint64(i)))
		n := sh.podsOn(i)
		pods := make([]*simPod, n)
		for j := range pods {
			p := newPod(rng, i+j*sh.simNodes(), sh.namespaces, name, sh.track)
			p.addr = addrAt(blocks[first[i]+j/bsize], j%bsize)
			if err := calicoResources(kv, p.wep()); err != nil {
				return err
			}
			pods[j] = p
		}
		for b := 0; b*bsize < n; b++ {
			calicoBlock(kv, name, blocks[first[i]+b], pods[b*bsize:min(n, (b+1)*bsize)])
		}
		r.pods[i] = pods
		return nil
	})
}

// localPods makes felix's pods' host devices: a veth each, its peer in
// the node namespace too (felix manages the cali side only).
func (r *cfxRun) localPods(ctx context.Context) error {
	for j, dev := range r.ifaces {
		peer := fmt.Sprintf("pod%d", j)
		for _, c := range [][]string{
			{"link", "add", dev, "address", "ee:ee:ee:ee:ee:ee", "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "up"},
			{"link", "set", dev, "up"},
		} {
			if err := ipCmd(ctx, r.ns, c...); err != nil {
				return err
			}
		}
	}
	return nil
}
