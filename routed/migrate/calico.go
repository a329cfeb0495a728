// Package migrate carries a live Calico cluster's state over to routed.
package migrate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// Calico's etcdv3 key layout (libcalico-go's model).
const (
	calicoResources    = "/calico/resources/v3/projectcalico.org/"
	calicoBlockPrefix  = "/calico/ipam/v2/assignment/ipv4/block/"
	calicoBlockPrefix6 = "/calico/ipam/v2/assignment/ipv6/block/"
	calicoAffinities   = "/calico/ipam/v2/host/"
	calicoIPAMConfig   = "/calico/ipam/v2/config"
)

// ErrNoCalico means the source etcd holds no Calico keys at all.
var ErrNoCalico = errors.New("migrate: no Calico datastore")

// ErrConflict means routed already holds state that differs from what
// the migration would write; nothing was written.
var ErrConflict = errors.New("migrate: routed's datastore already holds different state")

// Item is what the migration does with one resource.
type Item struct {
	Kind   api.Kind
	Name   string
	Action string // create, unchanged or conflict
	Detail string
}

// Report is the plan (dry run) or what was done.
type Report struct {
	Items  []Item
	Blocks []ipam.ImportResult
	// Skipped lists what could not be carried over, and why.
	Skipped []string
	// Warnings are Calico fields routed read without using.
	Warnings []string
}

// calicoKinds are the resources carried over, in the order written:
// pools before the blocks inside them, nodes before their endpoints,
// tiers before their policies.
var calicoKinds = []api.Kind{api.KindIPPool, api.KindBGPConfiguration, api.KindBGPFilter, api.KindBGPPeer, api.KindNode,
	api.KindTier, api.KindProfile, api.KindGlobalNetworkSet, api.KindNetworkSet, api.KindGlobalNetworkPolicy, api.KindNetworkPolicy}

// Calico reads a Calico etcdv3 datastore (from) and writes routed's
// pools, BGP configuration, filters, peers, nodes, tiers, policies,
// profiles, network sets, workload endpoints and IPAM state (blocks with
// their affinity, allocations and handles) into to, so running pods keep
// their addresses and their policy. It is idempotent: what
// routed already holds identically is left alone. If anything routed
// holds differs, nothing is written and the report names it. dryRun only
// plans.
func Calico(ctx context.Context, from, to *datastore.Client, dryRun bool) (*Report, error) {
	if err := hasCalico(ctx, from); err != nil {
		return nil, err
	}
	rep := &Report{}
	var carried []api.Resource
	for _, k := range calicoKinds {
		kvs, err := list(ctx, from, calicoResources+k.Plural()+"/")
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			r, warnings, err := decodeCalico(k, kv)
			if err != nil {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", k, err))
				continue
			}
			rep.Warnings = append(rep.Warnings, warnings...)
			if n, ok := r.(*api.Node); ok {
				// Calico's MACs are vxlan.calico's and vxlan-v6.calico's;
				// routed's devices have the MACs their node derives and
				// records, so the Node is written as routed will keep it
				// (a later run stays a no-op).
				if n.Spec.VXLANTunnelMACAddr != "" {
					n.Spec.VXLANTunnelMACAddr = api.VXLANMAC(n.Metadata.Name).String()
				}
				if n.Spec.VXLANTunnelMACAddrV6 != "" {
					n.Spec.VXLANTunnelMACAddrV6 = api.VXLANMACV6(n.Metadata.Name).String()
				}
			}
			carried = append(carried, r)
		}
	}
	carried, tierSkips, err := withTiers(ctx, to, carried)
	if err != nil {
		return nil, err
	}
	rep.Skipped = append(rep.Skipped, tierSkips...)
	left, err := leftovers(ctx, from)
	if err != nil {
		return nil, err
	}
	rep.Skipped = append(rep.Skipped, left...)
	cfg, err := calicoIPAMConfiguration(ctx, from)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		carried = append(carried, cfg)
	}
	pools := carriedPools(carried)

	blocks, addrHandle, skipped, err := calicoBlocks(ctx, from, pools)
	if err != nil {
		return nil, err
	}
	rep.Skipped = append(rep.Skipped, skipped...)

	kvs, err := list(ctx, from, calicoResources+api.KindWorkloadEndpoint.Plural()+"/")
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		w, err := calicoEndpoint(kv.Value, addrHandle)
		if err != nil {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("WorkloadEndpoint %s: %v", string(kv.Key), err))
			continue
		}
		carried = append(carried, w)
	}

	conflict := false
	for _, r := range carried {
		it := Item{Kind: r.GetKind(), Name: api.StoreName(r), Action: "create"}
		cur, err := to.Get(ctx, r.GetKind(), api.StoreName(r))
		switch {
		case datastore.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			if why := differs(cur, r); why != "" {
				it.Action, it.Detail, conflict = "conflict", why, true
			} else {
				it.Action = "unchanged"
			}
		}
		rep.Items = append(rep.Items, it)
	}
	ic := ipam.New(to)
	// The blocks are planned first: a conflict there also stops the
	// resources from being written.
	rep.Blocks, err = ic.Import(ctx, blocks, true)
	if err != nil {
		return rep, err
	}
	for _, b := range rep.Blocks {
		conflict = conflict || b.Action == ipam.ImportConflict
	}
	if conflict {
		return rep, fmt.Errorf("%w: nothing was written; see the entries marked conflict", ErrConflict)
	}
	if dryRun {
		return rep, nil
	}
	if _, err := to.InitClusterInfo(ctx); err != nil {
		return rep, err
	}

	tiersEnsured := false
	for i, r := range carried {
		if rep.Items[i].Action != "create" {
			continue
		}
		// The tiers routed always has are made once Calico's own tiers
		// (which may include them) are written, before any policy.
		if _, isPolicy := r.(api.Policy); isPolicy && !tiersEnsured {
			if err := to.EnsureDefaultTiers(ctx); err != nil {
				return rep, err
			}
			tiersEnsured = true
		}
		if _, err := to.Create(ctx, r); err != nil {
			return rep, fmt.Errorf("migrate: %s %s: %w", r.GetKind(), api.StoreName(r), err)
		}
	}
	rep.Blocks, err = ic.Import(ctx, blocks, false)
	return rep, err
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
		r := &api.IPAMConfiguration{
			TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPAMConfiguration},
			Metadata: api.ObjectMeta{Name: "default"},
			Spec:     api.IPAMConfigurationSpec{StrictAffinity: c.StrictAffinity, MaxBlocksPerHost: c.MaxBlocksPerHost, AutoAllocateBlocks: &c.AutoAllocateBlocks},
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("migrate: Calico's %s: %w", calicoIPAMConfig, err)
		}
		return r, nil
	}
	return nil, nil
}

// decodeCalico reads one stored Calico v3 resource the way routedctl
// reads a Calico file, and validates it.
func decodeCalico(k api.Kind, x kv) (api.Resource, []string, error) {
	key := "Calico key " + string(x.Key)
	var obj map[string]any
	if err := json.Unmarshal(x.Value, &obj); err != nil {
		return nil, nil, fmt.Errorf("%s: not JSON: %w", key, err)
	}
	obj["apiVersion"], obj["kind"] = api.CalicoAPIVersion, string(k)
	if k.Namespaced() {
		// The key is <plural>/<namespace>/<name>; the value should say
		// the namespace too, but the key is what Calico goes by.
		ns, _, _ := strings.Cut(strings.TrimPrefix(string(x.Key), calicoResources+k.Plural()+"/"), "/")
		if md, ok := obj["metadata"].(map[string]any); ok {
			md["namespace"] = ns
		}
	}
	raw, _ := json.Marshal(obj)
	d, err := api.DecodeSource(raw, key)
	if err != nil {
		return nil, nil, err
	}
	r := d.Resources[0]
	if err := r.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", key, err)
	}
	return r, d.Warnings, nil
}

func carriedPools(rs []api.Resource) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range rs {
		if p, ok := r.(*api.IPPool); ok {
			if pre, err := netip.ParsePrefix(p.Spec.CIDR); err == nil {
				out = append(out, pre.Masked())
			}
		}
	}
	return out
}

// calicoBlock is libcalico-go's AllocationBlock as stored.
type calicoBlock struct {
	CIDR        string  `json:"cidr"`
	Affinity    *string `json:"affinity"`
	Allocations []*int  `json:"allocations"`
	Attributes  []struct {
		HandleID  *string           `json:"handle_id"`
		Secondary map[string]string `json:"secondary"`
	} `json:"attributes"`
	Deleted bool `json:"deleted"`
}

// calicoAffinity is libcalico-go's BlockAffinity as stored.
type calicoAffinity struct {
	State   string `json:"state"`
	Deleted bool   `json:"deleted"`
}

// calicoBlocks converts Calico's blocks: those inside a carried pool,
// affine to a node with a confirmed affinity. It also returns which
// handle holds each allocated address.
func calicoBlocks(ctx context.Context, from *datastore.Client, pools []netip.Prefix) ([]ipam.ImportBlock, map[netip.Addr]string, []string, error) {
	affs, err := list(ctx, from, calicoAffinities)
	if err != nil {
		return nil, nil, nil, err
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
	kvs, err := list(ctx, from, calicoBlockPrefix)
	if err != nil {
		return nil, nil, nil, err
	}
	kvs6, err := list(ctx, from, calicoBlockPrefix6)
	if err != nil {
		return nil, nil, nil, err
	}
	kvs = append(kvs, kvs6...)
	var out []ipam.ImportBlock
	var skipped []string
	handles := map[netip.Addr]string{}
	for _, x := range kvs {
		var cb calicoBlock
		if err := json.Unmarshal(x.Value, &cb); err != nil {
			skipped = append(skipped, fmt.Sprintf("block %s: not JSON: %v", x.Key, err))
			continue
		}
		p, err := netip.ParsePrefix(cb.CIDR)
		if err != nil || cb.Deleted {
			skipped = append(skipped, fmt.Sprintf("block %s: bad cidr %q or marked deleted", x.Key, cb.CIDR))
			continue
		}
		node, _ := strings.CutPrefix(deref(cb.Affinity), "host:")
		var allocs []ipam.ImportAllocation
		for o, a := range cb.Allocations {
			if a == nil || *a < 0 || *a >= len(cb.Attributes) {
				continue
			}
			attr := cb.Attributes[*a]
			s := attr.Secondary
			ia := ipam.ImportAllocation{Ordinal: o, Handle: deref(attr.HandleID), Namespace: s["namespace"], Pod: s["pod"], Node: s["node"], Type: ipam.TypePod}
			switch s["type"] {
			case "":
			case "ipipTunnelAddress", "vxlanTunnelAddress", "vxlanV6TunnelAddress":
				ia.Type = ipam.TypeTunnel
			default:
				skipped = append(skipped, fmt.Sprintf("block %s: address %s (%s, handle %q): routed has no such allocation type; it will be free in routed", p, addrAt(p, o), s["type"], ia.Handle))
				continue
			}
			if ia.Handle == "" {
				skipped = append(skipped, fmt.Sprintf("block %s: address %s has no handle; it will be free in routed", p, addrAt(p, o)))
				continue
			}
			allocs = append(allocs, ia)
			handles[addrAt(p, o)] = ia.Handle
		}
		switch {
		case !slices.ContainsFunc(pools, func(pool netip.Prefix) bool { return pool.Bits() <= p.Bits() && pool.Contains(p.Addr()) }):
			skipped = append(skipped, fmt.Sprintf("block %s (%d addresses in use): not inside a carried IP pool", p, len(allocs)))
		case node == "" || !confirmed[node+" "+p.String()]:
			skipped = append(skipped, fmt.Sprintf("block %s (%d addresses in use): no confirmed affinity to a node", p, len(allocs)))
		default:
			out = append(out, ipam.ImportBlock{CIDR: p, Node: node, Allocations: allocs})
		}
	}
	return out, handles, skipped, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// addrAt is the address at offset o (within a block) from p's start, in
// either family.
func addrAt(p netip.Prefix, o int) netip.Addr {
	a := p.Addr()
	for range o {
		a = a.Next()
	}
	return a
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

// differs says how routed's cur differs from the migrated r ("" if not):
// spec and labels count, server-side metadata does not.
// withNodeTunnels returns Calico's Node n with the tunnel fields Calico
// left empty taken from routed's cur: a running node allocates and
// records its own tunnel addresses (and MAC) where Calico had none (a
// node Calico gave no VXLAN address yet), which is no conflict.
func withNodeTunnels(n, cur *api.Node) *api.Node {
	c := *n
	if c.Spec.IPv4VXLANTunnelAddr == "" && c.Spec.VXLANTunnelMACAddr == "" {
		c.Spec.IPv4VXLANTunnelAddr, c.Spec.VXLANTunnelMACAddr = cur.Spec.IPv4VXLANTunnelAddr, cur.Spec.VXLANTunnelMACAddr
	}
	if c.Spec.IPv6VXLANTunnelAddr == "" && c.Spec.VXLANTunnelMACAddrV6 == "" {
		c.Spec.IPv6VXLANTunnelAddr, c.Spec.VXLANTunnelMACAddrV6 = cur.Spec.IPv6VXLANTunnelAddr, cur.Spec.VXLANTunnelMACAddrV6
	}
	if c.Spec.BGP != nil && cur.Spec.BGP != nil && c.Spec.BGP.IPv4IPIPTunnelAddr == "" {
		bgp := *c.Spec.BGP
		bgp.IPv4IPIPTunnelAddr = cur.Spec.BGP.IPv4IPIPTunnelAddr
		c.Spec.BGP = &bgp
	}
	return &c
}

func differs(cur, r api.Resource) string {
	if n, ok := r.(*api.Node); ok {
		r = withNodeTunnels(n, cur.(*api.Node))
	}
	spec := func(x api.Resource) any { return reflect.ValueOf(x).Elem().FieldByName("Spec").Interface() }
	if !reflect.DeepEqual(spec(cur), spec(r)) {
		a, _ := json.Marshal(spec(cur))
		b, _ := json.Marshal(spec(r))
		return fmt.Sprintf("routed has spec %s, Calico %s", a, b)
	}
	if l1, l2 := cur.Meta().Labels, r.Meta().Labels; len(l1)+len(l2) > 0 && !reflect.DeepEqual(l1, l2) {
		return fmt.Sprintf("routed has labels %v, Calico %v", l1, l2)
	}
	return ""
}
