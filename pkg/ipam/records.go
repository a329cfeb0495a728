package ipam

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// Affinity states. Only a confirmed affinity means the node owns the
// block and may route it; pending is a claim in progress and
// pendingDeletion a release in progress.
const (
	StatePending         = "pending"
	StateConfirmed       = "confirmed"
	StatePendingDeletion = "pendingDeletion"
)

// Affinity says that a node has claimed (or is claiming, or releasing) a
// block.
type Affinity struct {
	Node  string
	CIDR  netip.Prefix
	State string /* "pending"|"confirmed"|"pendingDeletion" */
}

// affinityRec is the stored value of an affinity key.
type affinityRec struct {
	State string `json:"state"`
	// Since is when the state was set; GC uses it to tell a claim in
	// progress from one abandoned by a crash.
	Since time.Time `json:"since"`
}

func encodeAffinity(state string, now time.Time) []byte {
	data, _ := json.Marshal(affinityRec{State: state, Since: now.UTC()})
	return data
}

func decodeAffinity(data []byte) (affinityRec, error) {
	var a affinityRec
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("%w: affinity: %w", ErrCorrupt, err)
	}
	switch a.State {
	case StatePending, StateConfirmed, StatePendingDeletion:
		return a, nil
	}
	return a, fmt.Errorf("%w: affinity state %q", ErrCorrupt, a.State)
}

// handleRec is the stored value of a handle key: exactly which ordinals
// of which blocks the handle holds. It is always written in the same etcd
// transaction as the blocks it names, so the two never disagree.
type handleRec struct {
	ID string `json:"id"`
	// Blocks maps block CIDR to the ordinals held there, ascending.
	Blocks map[string][]int `json:"blocks"`
}

func decodeHandle(data []byte) (*handleRec, error) {
	var h handleRec
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%w: handle: %w", ErrCorrupt, err)
	}
	if h.Blocks == nil {
		h.Blocks = map[string][]int{}
	}
	return &h, nil
}

func (h *handleRec) encode() []byte {
	data, _ := json.Marshal(h)
	return data
}

func (h *handleRec) clone() *handleRec {
	c := &handleRec{ID: h.ID, Blocks: make(map[string][]int, len(h.Blocks))}
	for k, v := range h.Blocks {
		c.Blocks[k] = slices.Clone(v)
	}
	return c
}

func (h *handleRec) add(cidr string, ords ...int) {
	s := append(h.Blocks[cidr], ords...)
	sort.Ints(s)
	h.Blocks[cidr] = slices.Compact(s)
}

func (h *handleRec) remove(cidr string, o int) {
	s := slices.DeleteFunc(slices.Clone(h.Blocks[cidr]), func(x int) bool { return x == o })
	if len(s) == 0 {
		delete(h.Blocks, cidr)
		return
	}
	h.Blocks[cidr] = s
}

func (h *handleRec) empty() bool { return len(h.Blocks) == 0 }

func (h *handleRec) equal(o *handleRec) bool {
	return maps.EqualFunc(h.Blocks, o.Blocks, slices.Equal[[]int])
}

// poolInfo is a decoded pool with the revision it was read at.
type poolInfo struct {
	pool   *api.IPPool
	prefix netip.Prefix
	rev    int64
	sel    kernel.PoolNodeSelector
}

func (p *poolInfo) name() string { return p.pool.Metadata.Name }

// blockFor returns the block of this pool that contains ip.
func (p *poolInfo) blockFor(ip netip.Addr) netip.Prefix {
	return netip.PrefixFrom(ip, p.pool.Spec.BlockSize).Masked()
}

func (p *poolInfo) describe() string { return fmt.Sprintf("pool %q (%s)", p.name(), p.prefix) }

func decodePool(data []byte, rev int64) (*poolInfo, error) {
	var p api.IPPool
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	api.SetDefaults(&p)
	if err := p.Validate(); err != nil {
		return nil, err
	}
	sel, err := kernel.ParsePoolNodeSelector(p.Spec.NodeSelector)
	if err != nil {
		return nil, err
	}
	return &poolInfo{pool: &p, prefix: p.Prefix(), rev: rev, sel: sel}, nil
}

// poolContaining returns the pool whose CIDR contains ip.
func poolContaining(pools []*poolInfo, ip netip.Addr) *poolInfo {
	for _, p := range pools {
		if p.prefix.Contains(ip) {
			return p
		}
	}
	return nil
}

func poolOfBlock(pools []*poolInfo, b netip.Prefix) *poolInfo {
	for _, p := range pools {
		if p.prefix.Contains(b.Addr()) && p.pool.Spec.BlockSize == b.Bits() {
			return p
		}
	}
	return nil
}

func decodeIPAMConfig(data []byte) (api.IPAMConfigurationSpec, error) {
	var c api.IPAMConfiguration
	if err := json.Unmarshal(data, &c); err != nil {
		return c.Spec, err
	}
	return c.Spec, nil
}

func decodeNode(data []byte) (*api.Node, error) {
	var n api.Node
	err := json.Unmarshal(data, &n)
	return &n, err
}
