package felix

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// FlowsConfig turns on flow records (felix/policy/flowrec,
// docs/flows.md). They are on when PolicyLog.FlowGroup is set and
// there is a sink.
type FlowsConfig struct {
	// Sinks receive each batch of flows on the collector's goroutine
	// (the JSON-lines file, metrics, the aggregator's sender); they
	// must not block.
	Sinks []func(flowrec.Batch)
	// Interval groups flows (0: 3 s).
	Interval time.Duration
	// Source is where connections come from (flowrec.Config.Source;
	// "": the kernel's conntrack functions, else ctnetlink's events).
	Source string
}

// FlowKinds are the kinds felix takes from the feed for flow records
// only: staged policies, evaluated for each new connection on the
// flows' model and never given to the policy dataplane.
var FlowKinds = []api.Kind{api.KindStagedNetworkPolicy, api.KindStagedGlobalNetworkPolicy}

// flowsState is the model flow records name ends and evaluate staged
// policies on: a second policy model (policy.NewModel; the calculator
// that programs the kernel never evaluates staged policies), fed on
// felix's loop from the same resources. nil when flows are off.
type flowsState struct {
	node   string
	model  *flowrec.LockedModel
	staged map[string]policy.StagedPolicy
}

func newFlowsState(cfg *Config) *flowsState {
	if cfg.PolicyLog.FlowGroup == 0 || len(cfg.Flows.Sinks) == 0 || cfg.Features.DisablePolicy {
		return nil
	}
	return &flowsState{node: cfg.NodeName, model: flowrec.NewLockedModel(), staged: map[string]policy.StagedPolicy{}}
}

// set gives the model one resource (refused ones are logged by the
// policy dataplane, which gets the same).
func (s *flowsState) set(r api.Resource) {
	if s == nil {
		return
	}
	switch v := r.(type) {
	case *api.StagedNetworkPolicy:
		s.setStaged(policy.StagedPolicy{Kind: v.GetKind(), Namespace: v.Metadata.Namespace, Name: v.Metadata.Name, Action: v.Action(), Policy: v.Enforced()})
	case *api.StagedGlobalNetworkPolicy:
		s.setStaged(policy.StagedPolicy{Kind: v.GetKind(), Name: v.Metadata.Name, Action: v.Action(), Policy: v.Enforced()})
	case *api.WorkloadEndpoint:
		ep, err := policy.EndpointFromAPI(v, v.Spec.Node == s.node)
		if err != nil {
			// As the dataplane (endpointUnreadable).
			s.unreadableEndpoint(api.StoreName(v), nil, policy.RefusedEndpointAddrs(v), fmt.Errorf("refused: %w", err))
		}
		if err == nil {
			_ = s.model.Update(func(c *policy.Calc) error {
				c.ClearUnreadable(api.KindWorkloadEndpoint, api.StoreName(v))
				c.SetEndpoint(ep)
				return nil
			})
			s.model.SetPod(ep.Key, v.Spec.Pod)
		}
	default:
		if isPolicyKind(r.GetKind()) {
			var refused error
			_ = s.model.Update(func(c *policy.Calc) error {
				c.ClearUnreadable(r.GetKind(), api.StoreName(r))
				err := c.SetResource(r)
				if policy.RefusalFailsClosed(r.GetKind(), err) {
					refused = err
				}
				return err
			})
			if refused != nil {
				// As the dataplane: its previous version goes too.
				s.unreadable(r.GetKind(), api.StoreName(r), refused)
			}
		}
	}
}

// unreadable gives the model the deny felix installs for a record that
// does not decode (policy.Calc.SetUnreadable), in place of its previous
// version, so that staged verdicts are taken against what is enforced.
func (s *flowsState) unreadable(k api.Kind, name string, why error) {
	if s == nil || !slices.Contains(policy.UnreadableKinds, k) {
		return
	}
	s.delete(k, name)
	_ = s.model.Update(func(c *policy.Calc) error { return c.SetUnreadable(k, name, why) })
}

// unreadableUpdate is unreadable for a record the feed reported, of any
// kind felix denies for.
func (s *flowsState) unreadableUpdate(u feed.Update) {
	if u.Kind == api.KindWorkloadEndpoint {
		s.unreadableEndpoint(u.Name, nil, policy.SalvageEndpointAddrs(u.Value), u.Unreadable)
		return
	}
	s.unreadable(u.Kind, u.Name, u.Unreadable)
}

// unreadableEndpoint gives the model the deny felix installs for an
// unreadable WorkloadEndpoint (policy.Calc.SetUnreadableEndpoint), in
// place of its previous version: of known (felix's, when the model is
// new) with the model's own, and read.
func (s *flowsState) unreadableEndpoint(name string, known, read []netip.Prefix, why error) {
	if s == nil {
		return
	}
	known = slices.Clone(known)
	_ = s.model.Update(func(c *policy.Calc) error {
		known = append(known, c.EndpointAddrs(name)...)
		return nil
	})
	s.delete(api.KindWorkloadEndpoint, name)
	_ = s.model.Update(func(c *policy.Calc) error { return c.SetUnreadableEndpoint(name, known, read, why) })
}

func (s *flowsState) setStaged(p policy.StagedPolicy) {
	s.staged[p.Key()] = p
	s.pushStaged()
}

func (s *flowsState) pushStaged() {
	keys := slices.Sorted(maps.Keys(s.staged))
	list := make([]policy.StagedPolicy, 0, len(keys))
	for _, k := range keys {
		list = append(list, s.staged[k])
	}
	s.model.SetStaged(list)
}

// delete removes one resource from the model.
func (s *flowsState) delete(k api.Kind, name string) {
	if s == nil {
		return
	}
	ns, n := api.SplitStoreName(k, name)
	switch k {
	case api.KindStagedNetworkPolicy:
		delete(s.staged, policy.StagedPolicy{Kind: k, Namespace: ns, Name: n}.Key())
		s.pushStaged()
		return
	case api.KindStagedGlobalNetworkPolicy:
		delete(s.staged, policy.StagedPolicy{Kind: k, Name: name}.Key())
		s.pushStaged()
		return
	}
	_ = s.model.Update(func(c *policy.Calc) error {
		c.ClearUnreadable(k, name)
		switch k {
		case api.KindTier:
			c.DeleteTier(name)
		case api.KindNetworkPolicy:
			c.DeletePolicy("np:" + ns + "/" + n)
		case api.KindGlobalNetworkPolicy:
			c.DeletePolicy("gnp:" + name)
		case api.KindProfile:
			c.DeleteProfile(name)
		case api.KindNetworkSet:
			c.DeleteNetworkSet("ns:" + ns + "/" + n)
		case api.KindGlobalNetworkSet:
			c.DeleteNetworkSet("gns:" + name)
		case api.KindServiceEndpoints:
			c.DeleteServiceEndpoints(ns + "/" + n)
		case api.KindWorkloadEndpoint:
			c.DeleteEndpoint(name)
		}
		return nil
	})
	if k == api.KindWorkloadEndpoint {
		s.model.SetPod(name, "")
	}
}

// replace rebuilds the model from a snapshot (snapshots are rare: a
// start, a feed resync).
func (s *flowsState) replace(rs map[api.Kind][]api.Resource) {
	next := s.staging()
	next.setAll(rs)
	s.adopt(next)
}

// staging is an empty model beside s's, to fill with a snapshot and
// adopt: s's goes on naming flows meanwhile. nil when flows are off.
func (s *flowsState) staging() *flowsState {
	if s == nil {
		return nil
	}
	return &flowsState{node: s.node, model: flowrec.NewLockedModel(), staged: map[string]policy.StagedPolicy{}}
}

// setAll gives the model a snapshot's resources, in the policy's order.
func (s *flowsState) setAll(rs map[api.Kind][]api.Resource) {
	if s == nil {
		return
	}
	for _, k := range append(slices.Clone(policyReplaceOrder), FlowKinds...) {
		for _, r := range rs[k] {
			s.set(r)
		}
	}
}

// adopt makes next's model s's (the one the collector reads).
func (s *flowsState) adopt(next *flowsState) {
	if s == nil {
		return
	}
	s.model.Adopt(next.model)
	s.staged = next.staged
}

// runFlows records flows until ctx ends (felix's Run starts it with the
// policy dataplane's rule index). An nflog group or conntrack
// subscription the collector cannot open at the start is logged and
// opened later by the collector itself (flowrec.Collector.Open), so a
// moment's trouble then costs traces or records until it passes, not
// until felix restarts. Only a collector that cannot run at all (its
// configuration) leaves the node without flow records; felix goes on
// enforcing either way.
func (f *Felix) runFlows(ctx context.Context, netnsFd int, idx *policy.RuleIndex) {
	if err := flowrec.EnableAccounting(netnsFd); err != nil {
		f.log.WithError(err).Warn("flows: conntrack accounting is off: flows will have no packet or byte counts")
	}
	c, err := flowrec.New(flowrec.Config{Node: f.cfg.NodeName, NetnsFd: netnsFd, Group: f.cfg.PolicyLog.FlowGroup, Index: idx,
		Model: f.flows.model, Interval: f.cfg.Flows.Interval, Source: f.cfg.Flows.Source, Sinks: f.cfg.Flows.Sinks})
	if err == nil {
		err = c.Run(ctx)
	}
	if err != nil && ctx.Err() == nil {
		f.log.WithError(err).Error("flows: no flow records on this node")
	}
}

// removeFlowRules takes away the flow records' generation rules that a
// run with flows on left (flowrec.GenTable): with flows off nothing
// reads what they write.
func (f *Felix) removeFlowRules(netnsFd int) {
	removed, err := flowrec.RemoveGenRules(netnsFd)
	switch {
	case err != nil:
		f.log.WithError(err).Warn("flows: removing the flow records' generation rules (flows are off)")
	case removed:
		f.log.WithField("table", "inet "+flowrec.GenTable).Info("flows are off: removed the flow records' generation rules")
	}
}
