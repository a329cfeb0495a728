package flowrec

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/routed-net/routed/felix/policy"
)

// Model names a new flow's ends and says what the staged policies
// would decide. The collector calls it from its own goroutine once per
// new connection (not per packet).
type Model interface {
	Describe(f policy.Flow) (src, dst End, staged []policy.StagedVerdict)
}

// VersionedModel is a Model that says when its answers may change: while
// Version returns the same v with ok, Describe names the ends of a flow
// by its addresses alone and gives no staged verdicts, so the collector
// classifies connections alike once (ok is false when staged policies
// are evaluated: those may look at any of a flow's fields). The End
// values it returns may be shared between flows: their Labels must not
// be modified.
type VersionedModel interface {
	Model
	Version() (v uint64, ok bool)
}

// LockedModel is a Model over a policy model (policy.NewModel) that its
// owner feeds under Update. Staged policies are evaluated on it
// (policy.Calc.ExplainStaged only runs on a model, never on the
// calculator that programs the kernel).
type LockedModel struct {
	mu     sync.Mutex
	calc   *policy.Calc
	staged []policy.StagedPolicy
	// pods names remote endpoints' pods, which the model does not
	// keep (a big cluster's worth of strings it does not need).
	pods map[string]string
	// ends remembers the End of each address asked about since the
	// last change: an address is named (and its labels copied) once,
	// then shared by the flows that name it.
	ends map[netip.Addr]End
	// unstaged holds the (source, destination) pairs no staged
	// policy concerns, since the last change.
	unstaged map[[2]netip.Addr]bool
	// version counts changes; staged counts the staged policies.
	version, staged64 atomic.Uint64
}

// endsCap and pairsCap bound LockedModel.ends (an End with its labels
// is a few hundred bytes) and LockedModel.unstaged; past them a cache
// starts again empty.
const (
	endsCap  = 4096
	pairsCap = 16384
)

// changed marks a change (the lock held): names are asked again.
func (m *LockedModel) changed() {
	clear(m.ends)
	clear(m.unstaged)
	m.staged64.Store(uint64(len(m.staged)))
	m.version.Add(1)
}

// Version implements VersionedModel: ok while no staged policy is
// evaluated.
func (m *LockedModel) Version() (uint64, bool) {
	return m.version.Load(), m.staged64.Load() == 0
}

// NewLockedModel returns an empty model.
func NewLockedModel() *LockedModel {
	return &LockedModel{calc: policy.NewModel(), pods: map[string]string{}}
}

// Update runs fn on the model with the lock held.
func (m *LockedModel) Update(fn func(*policy.Calc) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.changed()
	return fn(m.calc)
}

// SetStaged replaces the staged policies evaluated for each new flow.
func (m *LockedModel) SetStaged(s []policy.StagedPolicy) {
	m.mu.Lock()
	m.staged = append([]policy.StagedPolicy(nil), s...)
	m.changed()
	m.mu.Unlock()
}

// Describe implements Model.
func (m *LockedModel) Describe(f policy.Flow) (src, dst End, staged []policy.StagedVerdict) {
	m.mu.Lock()
	defer m.mu.Unlock()
	src, dst = m.end(f.Src), m.end(f.Dst)
	if len(m.staged) > 0 && (src.Kind == EndPod || dst.Kind == EndPod) {
		// Which staged policies ExplainStaged evaluates depends on
		// the endpoints at the two addresses alone (those the staged
		// policy or its twin applies to, or that felix would refuse
		// it): a pair none concerns is remembered until the next
		// change, and its flows skip the policy walks.
		pair := [2]netip.Addr{f.Src, f.Dst}
		if m.unstaged[pair] {
			return src, dst, nil
		}
		// An error means a calculator that programs the kernel, which
		// NewLockedModel never holds.
		staged, _ = m.calc.ExplainStaged(f, m.calc.Explain(f), m.staged)
		if len(staged) == 0 {
			if len(m.unstaged) >= pairsCap {
				clear(m.unstaged)
			}
			if m.unstaged == nil {
				m.unstaged = map[[2]netip.Addr]bool{}
			}
			m.unstaged[pair] = true
		}
	}
	return src, dst, staged
}

// end names the end at a, once per address between changes.
func (m *LockedModel) end(a netip.Addr) End {
	if e, ok := m.ends[a]; ok {
		return e
	}
	e := m.lookup(a)
	if len(m.ends) >= endsCap {
		clear(m.ends)
	}
	if m.ends == nil {
		m.ends = map[netip.Addr]End{}
	}
	m.ends[a] = e
	return e
}

// lookup names the end at a from the policy model.
func (m *LockedModel) lookup(a netip.Addr) End {
	e := End{Addr: a.String(), Kind: EndNet}
	if key := m.calc.EndpointAt(a); key != "" {
		if ep, ok := m.calc.Endpoint(key); ok {
			e.Kind, e.Namespace, e.Name, e.Endpoint, e.Node, e.Local = EndPod, ep.Namespace, ep.Pod, ep.Key, ep.Node, ep.Local
			e.Labels, e.LabelsTruncated = capLabels(ep.Labels)
			if e.Name == "" {
				e.Name = m.pods[key]
			}
			if e.Name == "" {
				e.Name = ep.Key
			}
			return e
		}
	}
	if s, ok := m.calc.NetworkSetAt(a); ok {
		e.Kind, e.Namespace, e.Name = EndNetworkSet, s.Namespace, s.Key
		e.Labels, e.LabelsTruncated = capLabels(s.Labels)
	}
	return e
}

// Adopt makes o's policy model, staged policies and pods m's (a snapshot
// replaces everything: built beside m, which names flows meanwhile). o
// is not used after.
func (m *LockedModel) Adopt(o *LockedModel) {
	o.mu.Lock()
	calc, staged, pods := o.calc, o.staged, o.pods
	o.mu.Unlock()
	m.mu.Lock()
	m.calc, m.staged, m.pods = calc, staged, pods
	m.changed()
	m.mu.Unlock()
}

// SetPod names the pod of an endpoint ("" forgets it).
func (m *LockedModel) SetPod(endpoint, pod string) {
	m.mu.Lock()
	if pod == "" {
		delete(m.pods, endpoint)
	} else {
		m.pods[endpoint] = pod
	}
	m.changed()
	m.mu.Unlock()
}
