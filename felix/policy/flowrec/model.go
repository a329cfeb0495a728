package flowrec

import (
	"net/netip"
	"sync"

	"github.com/routed-net/routed/felix/policy"
)

// Model names a new flow's ends and says what the staged policies
// would decide. The collector calls it from its own goroutine once per
// new connection (not per packet).
type Model interface {
	Describe(f policy.Flow) (src, dst End, staged []policy.StagedVerdict)
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
}

// NewLockedModel returns an empty model.
func NewLockedModel() *LockedModel {
	return &LockedModel{calc: policy.NewModel(), pods: map[string]string{}}
}

// Update runs fn on the model with the lock held.
func (m *LockedModel) Update(fn func(*policy.Calc) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fn(m.calc)
}

// SetStaged replaces the staged policies evaluated for each new flow.
func (m *LockedModel) SetStaged(s []policy.StagedPolicy) {
	m.mu.Lock()
	m.staged = append([]policy.StagedPolicy(nil), s...)
	m.mu.Unlock()
}

// Describe implements Model.
func (m *LockedModel) Describe(f policy.Flow) (src, dst End, staged []policy.StagedVerdict) {
	m.mu.Lock()
	defer m.mu.Unlock()
	src, dst = m.end(f.Src), m.end(f.Dst)
	if len(m.staged) > 0 && (src.Kind == EndPod || dst.Kind == EndPod) {
		// An error means a calculator that programs the kernel, which
		// NewLockedModel never holds.
		staged, _ = m.calc.ExplainStaged(f, m.calc.Explain(f), m.staged)
	}
	return src, dst, staged
}

func (m *LockedModel) end(a netip.Addr) End {
	e := End{Addr: a.String(), Kind: EndNet}
	if key := m.calc.EndpointAt(a); key != "" {
		if ep, ok := m.calc.Endpoint(key); ok {
			e.Kind, e.Namespace, e.Name, e.Endpoint, e.Node, e.Labels, e.Local = EndPod, ep.Namespace, ep.Pod, ep.Key, ep.Node, ep.Labels, ep.Local
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
		e.Kind, e.Namespace, e.Name, e.Labels = EndNetworkSet, s.Namespace, s.Key, s.Labels
	}
	return e
}

// Reset empties the model (a snapshot replaces everything).
func (m *LockedModel) Reset() {
	m.mu.Lock()
	m.calc, m.staged, m.pods = policy.NewModel(), nil, map[string]string{}
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
	m.mu.Unlock()
}
