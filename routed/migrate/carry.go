package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// ErrNoCalico means the source holds no Calico state at all.
var ErrNoCalico = errors.New("migrate: no Calico datastore")

// ErrConflict means routed already holds state that differs from what
// the migration would write, or two Calico resources would be written
// under one name; nothing was written.
var ErrConflict = errors.New("migrate: conflicting state (routed already holds something different, or two Calico resources carry one name)")

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
	// Notes say what stays where it is and why (Kubernetes
	// NetworkPolicies, which routed's controllers convert).
	Notes []string
	// PolicyLosses are the Calico resources enforcing or shaping policy
	// that cannot be carried. Unless Options.AcceptPolicyLoss, any of
	// them refuses the run (ErrPolicyLoss) and nothing is written.
	PolicyLosses []PolicyLoss
	// Narrowed lists the changes made to carry a resource that deny at
	// least what Calico denied (an Allow rule with an HTTP match dropped).
	Narrowed []Narrowing
}

// Options steer one migration run.
type Options struct {
	// DryRun only plans: nothing is written.
	DryRun bool
	// AcceptPolicyLoss carries the rest when Calico resources that
	// enforce or shape policy cannot be carried (Report.PolicyLosses);
	// without it such a run writes nothing and fails with ErrPolicyLoss.
	AcceptPolicyLoss bool
	// Progress, when set, is called after each resource is written
	// (Action "create"), on the caller's goroutine.
	Progress func(Item)
	// Planned, when set, is called with the complete plan once nothing
	// refuses it and before the first write (not on a dry run), so what
	// is not carried, narrowed or lost is shown before anything is
	// written.
	Planned func(*Report)
}

// calicoState is what one Calico datastore holds, converted to routed's
// terms: the resources to write (carry orders them), the IPAM blocks
// with their allocations, and what is not carried. Both sources (etcd,
// Kubernetes) produce one; carry plans and writes it.
type calicoState struct {
	resources []api.Resource
	blocks    []ipam.ImportBlock
	skipped   []string
	warnings  []string
	notes     []string
	// losses are what skipped would hold but for enforcing or shaping
	// policy (refused); narrowed, what convert changed to carry.
	losses   []PolicyLoss
	narrowed []Narrowing
	// felix is what the FelixConfigurations read set (felixenv.go).
	felix felixSeen
}

// writeOrder is the order resources are written in: pools before the
// blocks inside them, nodes before their endpoints, tiers and profiles
// before the policies and endpoints naming them, the endpoints last
// (host endpoints after the policies selecting them: one applying
// before them would only have its profile's rules, which may allow
// everything, as projectcalico-default-allow does). Kinds not listed go
// first.
var writeOrder = []api.Kind{api.KindIPPool, api.KindBGPConfiguration, api.KindBGPFilter, api.KindBGPPeer, api.KindNode,
	api.KindTier, api.KindProfile, api.KindGlobalNetworkSet, api.KindNetworkSet, api.KindGlobalNetworkPolicy, api.KindNetworkPolicy,
	api.KindHostEndpoint, api.KindIPAMConfiguration, api.KindWorkloadEndpoint}

// carry plans st against routed's datastore to and, unless opts.DryRun
// or anything conflicts, writes it: the resources in writeOrder, then
// the blocks. What routed holds identically is left alone, so a run
// interrupted at any point completes when run again.
func carry(ctx context.Context, to *datastore.Client, st *calicoState, opts Options) (*Report, error) {
	rep := &Report{Skipped: st.skipped, Warnings: st.warnings, Notes: st.notes,
		PolicyLosses: slices.Clone(st.losses), Narrowed: st.narrowed}
	carried, tierLosses, err := withTiers(ctx, to, st.resources)
	if err != nil {
		return nil, err
	}
	rep.PolicyLosses = append(rep.PolicyLosses, tierLosses...)
	// A narrowed policy lost for its tier is not carried narrowed.
	rep.Narrowed = slices.DeleteFunc(slices.Clone(rep.Narrowed), func(n Narrowing) bool {
		return slices.ContainsFunc(tierLosses, func(l PolicyLoss) bool { return l.Kind == string(n.Kind) && l.Name == n.Name })
	})
	for _, r := range carried {
		routedNodeMACs(r)
	}
	rank := func(k api.Kind) int { return slices.Index(writeOrder, k) }
	slices.SortStableFunc(carried, func(a, b api.Resource) int { return rank(a.GetKind()) - rank(b.GetKind()) })

	// What routed holds is read one kind at a time (a list each, not a
	// read per resource: a big cluster has a hundred thousand endpoints).
	held := map[api.Kind]map[string]api.Resource{}
	conflict := false
	// Two Calico resources may carry one routed name (a policy stored
	// as default.x and another given the name x): both would be planned
	// as created and the write would stop half way at the second.
	named := map[api.Kind]map[string]int{}
	for _, r := range carried {
		k := r.GetKind()
		if named[k] == nil {
			named[k] = map[string]int{}
		}
		named[k][api.StoreName(r)]++
	}
	for _, r := range carried {
		k := r.GetKind()
		if n := named[k][api.StoreName(r)]; n > 1 {
			rep.Items = append(rep.Items, Item{Kind: k, Name: api.StoreName(r), Action: "conflict",
				Detail: fmt.Sprintf("%d resources in Calico's datastore carry this name into routed; rename or delete all but one", n)})
			conflict = true
			continue
		}
		if held[k] == nil {
			rs, _, err := to.List(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("migrate: reading routed's %s: %w", k.Plural(), err)
			}
			held[k] = make(map[string]api.Resource, len(rs))
			for _, x := range rs {
				held[k][api.StoreName(x)] = x
			}
		}
		it := Item{Kind: k, Name: api.StoreName(r), Action: "create"}
		if cur, ok := held[k][it.Name]; ok {
			if takenOver(cur, r) {
				it.Action, it.Detail = "unchanged", takenOverDetail(cur)
			} else if why := differs(cur, r); why != "" {
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
	// The plan writes nothing, not even the move of an older routed's
	// IPAM layout (a real run moves it once the plan is through).
	rep.Blocks, err = ic.Import(ipam.ReadOnly(ctx), st.blocks, true)
	oldLayout := errors.Is(err, ipam.ErrOldLayout) && !opts.DryRun
	if err != nil && !oldLayout {
		return rep, err
	}
	for _, b := range rep.Blocks {
		conflict = conflict || b.Action == ipam.ImportConflict
	}
	// Both refusals are named when both apply: the operator fixes both
	// before anything is written.
	var refusals []error
	if conflict {
		refusals = append(refusals, fmt.Errorf("%w: nothing was written; see the entries marked conflict", ErrConflict))
	}
	if len(rep.PolicyLosses) > 0 && !opts.AcceptPolicyLoss {
		refusals = append(refusals, policyLossError(rep.PolicyLosses))
	}
	if len(refusals) > 0 {
		return rep, errors.Join(refusals...)
	}
	if opts.DryRun {
		return rep, nil
	}
	if oldLayout {
		// routed's datastore holds blocks of an older routed: planning
		// them needs them moved (the first write of this run), then
		// planned again.
		if rep.Blocks, err = ic.Import(ctx, st.blocks, true); err != nil {
			return rep, err
		}
		for _, b := range rep.Blocks {
			if b.Action == ipam.ImportConflict {
				return rep, fmt.Errorf("%w: only routed's IPAM layout was moved; see the entries marked conflict", ErrConflict)
			}
		}
	}
	if opts.Planned != nil {
		opts.Planned(rep)
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
		if opts.Progress != nil {
			opts.Progress(rep.Items[i])
		}
	}
	rep.Blocks, err = ic.Import(ctx, st.blocks, false)
	return rep, err
}

// routedNodeMACs rewrites a Node's VXLAN MACs as routed keeps them:
// Calico's are vxlan.calico's and vxlan-v6.calico's, routed's devices
// have the MACs their node derives and records, so the Node is written
// as routed will keep it (a later run stays a no-op).
func routedNodeMACs(r api.Resource) {
	n, ok := r.(*api.Node)
	if !ok {
		return
	}
	if n.Spec.VXLANTunnelMACAddr != "" {
		n.Spec.VXLANTunnelMACAddr = api.VXLANMAC(n.Metadata.Name).String()
	}
	if n.Spec.VXLANTunnelMACAddrV6 != "" {
		n.Spec.VXLANTunnelMACAddrV6 = api.VXLANMACV6(n.Metadata.Name).String()
	}
}

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
	if c.Spec.Wireguard == nil {
		c.Spec.Wireguard = cur.Spec.Wireguard // the WireGuard device addresses (routed/tunneladdr)
	}
	return &c
}

// differs says how routed's cur differs from the migrated r ("" if not):
// spec and labels count, server-side metadata does not.
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
