package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// The simulated cluster of `scale big` as Calico's etcdv3 backend stores
// it (libcalico-go's model.ResourceKey paths and projectcalico.org/v3
// JSON), for Calico's own felix: the same generator's objects, each
// converted the way routed/migrate reads them back.

const calicoRes = "/calico/resources/v3/projectcalico.org/"

// calicoKV is the key and value under which libcalico-go stores r: a
// policy under its tier's prefix with the name it was given in the
// projectcalico.org/metadata annotation (as v3.30 and later write it), a
// WorkloadEndpoint under its namespace with Calico's name for it,
// routed's own fields dropped.
func calicoKV(r api.Resource) (string, string, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return "", "", err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", "", err
	}
	obj["apiVersion"] = api.CalicoAPIVersion
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		return "", "", fmt.Errorf("%s %s: no metadata", r.GetKind(), r.Meta().Name)
	}
	delete(md, "annotations") // routed-controllers' ownership marks
	name, ns := r.Meta().Name, r.Meta().Namespace
	switch x := r.(type) {
	case *api.WorkloadEndpoint:
		// Calico's names have no namespace: <node>-<orchestrator>-<pod>-<endpoint>.
		dash := func(s string) string { return strings.ReplaceAll(s, "-", "--") }
		name = strings.Join([]string{dash(x.Spec.Node), dash(x.Spec.Orchestrator), dash(x.Spec.Pod), dash(x.Spec.Endpoint)}, "-")
		md["name"] = name
		ns = x.Spec.Namespace
		if spec, ok := obj["spec"].(map[string]any); ok {
			delete(spec, "handle")
		}
	case *api.NetworkPolicy, *api.GlobalNetworkPolicy:
		given, _ := json.Marshal(map[string]string{"name": name})
		md["annotations"] = map[string]string{"projectcalico.org/metadata": string(given)}
		name = api.DefaultTierName + "." + name
		md["name"] = name
	}
	key := calicoRes + r.GetKind().Plural() + "/"
	if ns != "" {
		md["namespace"] = ns
		key += ns + "/"
	}
	val, err := json.Marshal(obj)
	if err != nil {
		return "", "", err
	}
	return key + name, string(val), nil
}

// calicoResources converts rs (calicoKV) into kv.
func calicoResources(kv map[string]string, rs ...api.Resource) error {
	for _, r := range rs {
		k, v, err := calicoKV(r)
		if err != nil {
			return err
		}
		kv[k] = v
	}
	return nil
}

// calicoBlock is the IPAM block and affinity Calico's IPAM leaves for
// pods of node in block b (libcalico-go's AllocationBlock: one
// attribute per allocation, the handle k8s-pod-network.<container id>).
func calicoBlock(kv map[string]string, node string, b netip.Prefix, pods []*simPod) {
	size := 1 << (32 - b.Bits())
	allocs := make([]string, size)
	var unalloc, attrs []string
	used := map[int]*simPod{}
	for _, p := range pods {
		used[ordinal(b, p.addr)] = p
	}
	for o := range allocs {
		p := used[o]
		if p == nil {
			allocs[o] = "null"
			unalloc = append(unalloc, fmt.Sprint(o))
			continue
		}
		allocs[o] = fmt.Sprint(len(attrs))
		attrs = append(attrs, fmt.Sprintf(`{"handle_id":"k8s-pod-network.%s","secondary":{"namespace":%q,"node":%q,"pod":%q,"timestamp":"2026-11-29 09:00:00.123456789 +0000 UTC"}}`,
			p.cid, p.namespace(), node, p.name))
	}
	bk := strings.Replace(b.String(), "/", "-", 1)
	kv["/calico/ipam/v2/assignment/ipv4/block/"+bk] = fmt.Sprintf(`{"cidr":%q,"affinity":"host:%s","strictAffinity":false,"allocations":[%s],"unallocated":[%s],"attributes":[%s],"deleted":false}`,
		b, node, strings.Join(allocs, ","), strings.Join(unalloc, ","), strings.Join(attrs, ","))
	kv[fmt.Sprintf("/calico/ipam/v2/host/%s/ipv4/block/%s", node, bk)] = `{"state":"confirmed","deleted":false}`
}

// ordinal is a's place in block b.
func ordinal(b netip.Prefix, a netip.Addr) int {
	u := func(a netip.Addr) uint32 { x := a.As4(); return binary.BigEndian.Uint32(x[:]) }
	return int(u(a) - u(b.Addr()))
}

// calicoCluster is what calico-node, the operator and
// calico-kube-controllers write besides the cluster's objects: the
// cluster's readiness (felix waits for it), felix's configuration, the
// pool and the tiers.
func calicoCluster(kv map[string]string, pool netip.Prefix, blockBits int) {
	kv[calicoRes+"clusterinformations/default"] = `{"kind":"ClusterInformation","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"clusterGUID":"9c1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a","clusterType":"k8s,bgp","calicoVersion":"v3.31.0","datastoreReady":true}}`
	kv[calicoRes+"felixconfigurations/default"] = `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"reportingInterval":"0s","logSeverityScreen":"Info"}}`
	kv[calicoRes+"ippools/default-ipv4-ippool"] = fmt.Sprintf(`{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":%q,"ipipMode":"Never","vxlanMode":"Never","natOutgoing":true,"blockSize":%d,"nodeSelector":"all()"}}`, pool, blockBits)
	for _, t := range []struct {
		name, action string
		order        int
	}{{"kube-admin", "Pass", 1000}, {"default", "Deny", 1000000}, {"kube-baseline", "Pass", 10000000}} {
		kv[calicoRes+"tiers/"+t.name] = fmt.Sprintf(`{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":%q},"spec":{"order":%d,"defaultAction":%q}}`, t.name, t.order, t.action)
	}
}

// putKVs writes kv in transactions of txnOps, one after the other.
func (ld *loader) putKVs(ctx context.Context, kv map[string]string) error {
	ops := make([]clientv3.Op, 0, txnOps)
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := datastore.RetryUnavailable(ctx, func() error {
			ld.txns.Add(1)
			_, err := ld.ds.Etcd().Txn(ctx).Then(ops...).Commit()
			return ld.ds.Wrap(err)
		})
		ops = ops[:0]
		return err
	}
	for k, v := range kv {
		ops = append(ops, clientv3.OpPut(k, v))
		if len(ops) == txnOps {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// putAllKVs writes gen(i)'s keys for i < n, gen(i) on ld's workers.
func (ld *loader) putAllKVs(ctx context.Context, n int, gen func(i int, kv map[string]string) error) error {
	return ld.parallel(ctx, n, func(ctx context.Context, i int) error {
		kv := map[string]string{}
		if err := gen(i, kv); err != nil {
			return err
		}
		return ld.putKVs(ctx, kv)
	})
}
