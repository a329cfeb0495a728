// Package migrate carries a live Calico cluster's state over to routed.
package migrate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Calico's etcdv3 key layout (libcalico-go's model).
const (
	calicoResources    = "/calico/resources/v3/projectcalico.org/"
	calicoBlockPrefix  = "/calico/ipam/v2/assignment/ipv4/block/"
	calicoBlockPrefix6 = "/calico/ipam/v2/assignment/ipv6/block/"
	calicoAffinities   = "/calico/ipam/v2/host/"
	calicoIPAMConfig   = "/calico/ipam/v2/config"
)

// calicoKinds are the resources carried over, in the order written:
// pools (and their reservations) before the blocks inside them, nodes
// before their endpoints, tiers before their policies, staged policies
// after the policies they stage.
var calicoKinds = []api.Kind{api.KindIPPool, api.KindIPReservation, api.KindFelixConfiguration,
	api.KindBGPConfiguration, api.KindBGPFilter, api.KindBGPPeer, api.KindNode, api.KindHostEndpoint,
	api.KindTier, api.KindProfile, api.KindGlobalNetworkSet, api.KindNetworkSet, api.KindGlobalNetworkPolicy, api.KindNetworkPolicy,
	api.KindStagedGlobalNetworkPolicy, api.KindStagedNetworkPolicy, api.KindStagedKubernetesNetworkPolicy}

// Calico reads a Calico etcdv3 datastore (from) and writes routed's
// pools, BGP configuration, filters, peers, nodes, tiers, policies,
// profiles, network sets, workload endpoints and IPAM state (blocks with
// their affinity, allocations and handles) into to, so running pods keep
// their addresses and their policy. It is idempotent: what
// routed already holds identically is left alone. If anything routed
// holds differs, nothing is written and the report names it.
// opts.DryRun only plans.
func Calico(ctx context.Context, from, to *datastore.Client, opts Options) (*Report, error) {
	if err := hasCalico(ctx, from); err != nil {
		return nil, err
	}
	st, err := readEtcd(ctx, from)
	if err != nil {
		return nil, err
	}
	return carry(ctx, to, st, opts)
}

// readEtcd reads and converts everything the migration carries from
// Calico's etcd.
func readEtcd(ctx context.Context, from *datastore.Client) (*calicoState, error) {
	st := &calicoState{}
	for _, k := range calicoKinds {
		kvs, err := list(ctx, from, calicoResources+k.Plural()+"/")
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			where := "Calico key " + string(kv.Key)
			obj, err := calicoJSON(k, kv)
			if err != nil {
				st.refused(k, obj, where, err)
				continue
			}
			st.felix.saw(k, obj)
			if r := st.convert(k, obj, where); r != nil {
				handOver(r)
				st.resources = append(st.resources, r)
			}
		}
	}
	if err := st.leftovers(ctx, from); err != nil {
		return nil, err
	}
	st.etcdUnchecked()
	cfg, err := calicoIPAMConfiguration(ctx, from)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		st.resources = append(st.resources, cfg)
	}

	bs, err := calicoBlocks(ctx, from, carriedPools(st.resources))
	if err != nil {
		return nil, err
	}
	st.blocks = bs.blocks
	st.skipped = append(st.skipped, bs.skipped...)

	kvs, err := list(ctx, from, calicoResources+api.KindWorkloadEndpoint.Plural()+"/")
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		w, err := calicoEndpoint(kv.Value, bs.handles)
		if err != nil {
			st.skipped = append(st.skipped, fmt.Sprintf("WorkloadEndpoint %s: %v", string(kv.Key), err))
			continue
		}
		st.resources = append(st.resources, w)
	}
	if err := st.etcdAutoHostEndpoints(ctx, from); err != nil {
		return nil, err
	}
	st.defaultAllowProfile()
	return st, nil
}

// etcdAutoHostEndpoints reads Calico's KubeControllersConfigurations
// from etcd (status included: what calico-kube-controllers run) and
// says what becomes of the automatic host endpoints (autohep.go).
func (st *calicoState) etcdAutoHostEndpoints(ctx context.Context, from *datastore.Client) error {
	kvs, err := list(ctx, from, calicoResources+kubeControllersConfigs+"/")
	if err != nil {
		return err
	}
	objs := map[string]map[string]any{}
	for _, kv := range kvs {
		where := "Calico key " + string(kv.Key)
		var obj map[string]any
		if err := json.Unmarshal(kv.Value, &obj); err != nil {
			return fmt.Errorf("migrate: %s: not JSON: %w", where, err)
		}
		objs[where] = obj
	}
	cfg, err := st.kubeControllersConfig(objs)
	if err != nil {
		return err
	}
	st.autoHostEndpoints(cfg, nil)
	return nil
}

// list reads every key under prefix from Calico's etcd, within the
// source's request timeout (an etcd that never completes the handshake,
// e.g. one asking for a client certificate, is an error, not a hang).
func list(ctx context.Context, c *datastore.Client, prefix string) ([]kv, error) {
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.Etcd().Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("migrate: reading Calico's %s: %w", prefix, c.Wrap(err))
	}
	out := make([]kv, len(resp.Kvs))
	for i, x := range resp.Kvs {
		out[i] = kv{Key: x.Key, Value: x.Value}
	}
	return out, nil
}

type kv struct{ Key, Value []byte }

// calicoIPAMConfiguration converts Calico's IPAM configuration
// (libcalico-go model.IPAMConfig), nil when Calico has none. Calico
// omits false booleans, so a missing auto_allocate_blocks is false.
func calicoIPAMConfiguration(ctx context.Context, from *datastore.Client) (*api.IPAMConfiguration, error) {
	kvs, err := list(ctx, from, calicoIPAMConfig)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		if string(kv.Key) != calicoIPAMConfig {
			continue
		}
		var c struct {
			StrictAffinity     bool `json:"strict_affinity"`
			AutoAllocateBlocks bool `json:"auto_allocate_blocks"`
			MaxBlocksPerHost   int  `json:"maxBlocksPerHost"`
		}
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("migrate: Calico's %s is not IPAM configuration JSON: %w", calicoIPAMConfig, err)
		}
		return ipamConfiguration(c.StrictAffinity, c.AutoAllocateBlocks, c.MaxBlocksPerHost, calicoIPAMConfig)
	}
	return nil, nil
}

// decodeCalico reads one stored Calico v3 resource the way routedctl
// reads a Calico file, and validates it.
func decodeCalico(k api.Kind, x kv) (api.Resource, []string, error) {
	obj, err := calicoJSON(k, x)
	if err != nil {
		return nil, nil, err
	}
	return decodeCalicoObject(k, obj, "Calico key "+string(x.Key))
}

// calicoJSON is one stored Calico v3 resource as the Calico object it
// stands for: the name Calico shows, the namespace its key says, no
// status. The object is returned with the error when it is JSON.
func calicoJSON(k api.Kind, x kv) (map[string]any, error) {
	key := "Calico key " + string(x.Key)
	var obj map[string]any
	if err := json.Unmarshal(x.Value, &obj); err != nil {
		return nil, fmt.Errorf("%s: not JSON: %w", key, err)
	}
	// The status (a Node's, an IPPool's conditions) is written by
	// Calico's components, never applied: it is not read.
	delete(obj, "status")
	if tieredPolicy(k) {
		if err := restorePolicyName(obj); err != nil {
			return obj, fmt.Errorf("%s: %w", key, err)
		}
	}
	if k.Namespaced() {
		// The key is <plural>/<namespace>/<name>; the value should say
		// the namespace too, but the key is what Calico goes by.
		ns, _, _ := strings.Cut(strings.TrimPrefix(string(x.Key), calicoResources+k.Plural()+"/"), "/")
		if md, ok := obj["metadata"].(map[string]any); ok {
			md["namespace"] = ns
		}
	}
	return obj, nil
}

// decodeCalicoObject reads one Calico v3 object (any apiVersion it was
// stored under) as routedctl reads a Calico file, and validates it;
// where names it in errors and warnings.
func decodeCalicoObject(k api.Kind, obj map[string]any, where string) (api.Resource, []string, error) {
	obj["apiVersion"], obj["kind"] = api.CalicoAPIVersion, string(k)
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	d, err := api.DecodeSource(raw, where)
	if err != nil {
		return nil, nil, err
	}
	r := d.Resources[0]
	if err := r.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	return r, d.Warnings, nil
}

// calicoAffinity is libcalico-go's BlockAffinity as stored.
type calicoAffinity struct {
	State   string `json:"state"`
	Deleted bool   `json:"deleted"`
}

// calicoBlocks reads Calico's blocks and affinities from etcd and
// converts them (convertBlocks).
func calicoBlocks(ctx context.Context, from *datastore.Client, pools []netip.Prefix) (blockSet, error) {
	affs, err := list(ctx, from, calicoAffinities)
	if err != nil {
		return blockSet{}, err
	}
	confirmed := map[string]bool{} // "<node> <cidr>"
	for _, a := range affs {
		// /calico/ipam/v2/host/<node>/ipv4/block/<cidr with - for />
		parts := strings.Split(strings.TrimPrefix(string(a.Key), calicoAffinities), "/")
		if len(parts) != 4 || (parts[1] != "ipv4" && parts[1] != "ipv6") || parts[2] != "block" {
			continue
		}
		var rec calicoAffinity
		_ = json.Unmarshal(a.Value, &rec)
		// Affinities written before Calico v3.14 have no state: confirmed.
		if !rec.Deleted && (rec.State == "" || rec.State == "confirmed") {
			confirmed[parts[0]+" "+strings.Replace(parts[3], "-", "/", 1)] = true
		}
	}
	var raw []rawBlock
	for _, prefix := range []string{calicoBlockPrefix, calicoBlockPrefix6} {
		kvs, err := list(ctx, from, prefix)
		if err != nil {
			return blockSet{}, err
		}
		for _, x := range kvs {
			raw = append(raw, rawBlock{where: string(x.Key), data: x.Value})
		}
	}
	return convertBlocks(raw, confirmed, pools), nil
}

// calicoEndpoint converts a stored Calico v3 WorkloadEndpoint. Its
// handle is the one holding its address in the imported blocks.
func calicoEndpoint(data []byte, addrHandle map[netip.Addr]string) (*api.WorkloadEndpoint, error) {
	var c struct {
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Orchestrator  string   `json:"orchestrator"`
			Node          string   `json:"node"`
			ContainerID   string   `json:"containerID"`
			Pod           string   `json:"pod"`
			Endpoint      string   `json:"endpoint"`
			InterfaceName string   `json:"interfaceName"`
			IPNetworks    []string `json:"ipNetworks"`
			MAC           string   `json:"mac"`
			// Policy identity: the profiles (kns.<ns>, ksa.<ns>.<sa>),
			// service account and named ports.
			Profiles           []string                   `json:"profiles"`
			ServiceAccountName string                     `json:"serviceAccountName"`
			Ports              []api.WorkloadEndpointPort `json:"ports"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	w := &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		// routed's name has the namespace in it (Calico's key has it
		// instead), and is what the CNI plugin looks the endpoint up by.
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(c.Spec.Node, cmp.Or(c.Spec.Orchestrator, "k8s"),
			c.Metadata.Namespace, c.Spec.Pod, c.Spec.ContainerID, c.Spec.Endpoint), Labels: c.Metadata.Labels},
		Spec: api.WorkloadEndpointSpec{
			Node: c.Spec.Node, Orchestrator: c.Spec.Orchestrator, Namespace: c.Metadata.Namespace, Pod: c.Spec.Pod,
			ContainerID: c.Spec.ContainerID, Endpoint: c.Spec.Endpoint, InterfaceName: c.Spec.InterfaceName,
			ContainerInterface: c.Spec.Endpoint, IPNetworks: c.Spec.IPNetworks, MAC: c.Spec.MAC,
			Profiles: c.Spec.Profiles, ServiceAccountName: c.Spec.ServiceAccountName, Ports: c.Spec.Ports,
		},
	}
	for i := range w.Spec.Ports {
		// Older Calico wrote port protocols lower-case ("tcp").
		w.Spec.Ports[i].Protocol = w.Spec.Ports[i].Protocol.Canonical()
	}
	for _, n := range c.Spec.IPNetworks {
		if p, err := netip.ParsePrefix(n); err == nil {
			if h, ok := addrHandle[p.Addr()]; ok {
				w.Spec.Handle = h
			}
		}
	}
	if w.Spec.Handle == "" {
		return nil, fmt.Errorf("none of its addresses %v is allocated in a carried block", c.Spec.IPNetworks)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return w, nil
}
