package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Report is what Check found and, after GC, what GC did about it.
type Report struct {
	// Revision is the datastore revision the check read.
	Revision int64
	// Leaks are allocations older than the grace period that nothing uses:
	// pod addresses whose handle no WorkloadEndpoint names, tunnel
	// addresses of deleted nodes or that their Node no longer names.
	Leaks []Leak
	// YoungLeaks counts suspects younger than the grace period, left
	// alone because a CNI ADD allocates before it writes the endpoint.
	YoungLeaks int
	// Held, when set, says why GC frees no pod address this time:
	// endpoint records that do not decode and say neither a handle nor
	// an address could be naming any of the Leaks.
	Held string
	// DeadNodeBlocks are blocks affine to nodes that no longer exist.
	// They are removed once nothing in them is allocated.
	DeadNodeBlocks []BlockUsage
	// DanglingAffinities have no block affine to their node (pending ones
	// only once older than the grace period).
	DanglingAffinities []Affinity
	// EmptyHandles are handle records that hold no address.
	EmptyHandles []string
	// Inconsistencies are records that contradict each other; see Verify.
	Inconsistencies []string
	// Overlaps are blocks claiming the same addresses (a pool's
	// blockSize changed under them, or a bug): duplicate pod IPs.
	Overlaps []BlockOverlap
	// OutsidePools are blocks no pool contains any more.
	OutsidePools []BlockUsage
	// SharedAddresses are addresses more than one endpoint names.
	SharedAddresses []SharedAddress
	// EndpointMismatches are endpoints whose address IPAM does not hold
	// for them.
	EndpointMismatches []EndpointMismatch

	// What GC did.
	Released          []netip.Addr
	RemovedBlocks     []netip.Prefix
	RemovedAffinities []Affinity
	RemovedHandles    []string
	Repaired          []string
	// Errors lists GC steps that failed; GC carries on with the others.
	Errors []string
}

// Leak is an allocation that nothing uses any more.
type Leak struct {
	Allocation
	Reason string
}

// Problems counts what Check found.
func (r *Report) Problems() int {
	return len(r.Leaks) + len(r.DeadNodeBlocks) + len(r.DanglingAffinities) + len(r.EmptyHandles) + len(r.Inconsistencies) +
		len(r.Overlaps) + len(r.OutsidePools) + len(r.SharedAddresses) + len(r.EndpointMismatches)
}

// Check reports leaked allocations, blocks of deleted nodes, affinities
// without blocks, handles without addresses and inconsistent records. It
// changes nothing. Leaks younger than grace are only counted.
func (c *Client) Check(ctx context.Context, grace time.Duration) (*Report, error) {
	s, err := c.snapshot(ctx, true)
	if err != nil {
		return nil, err
	}
	s.reclaimable = c.reclaimable
	return s.check(c.now(), grace), nil
}

func (s *snapshot) check(now time.Time, grace time.Duration) *Report {
	r := &Report{Revision: s.rev, Inconsistencies: s.inconsistencies()}
	if s.eps != nil && s.eps.blind > 0 {
		r.Held = fmt.Sprintf("%d workload endpoint record(s) do not decode and say neither a handle nor an address: their pods may hold any of these addresses, so no pod address is freed until they are fixed or deleted (listed under inconsistent records)", s.eps.blind)
	}
	s.checkPlacement(r)
	x, eps := s.index(), s.eps
	for i, key := range x.keys {
		b := s.blocks[key].b
		if s.gone(b.owner()) {
			r.DeadNodeBlocks = append(r.DeadNodeBlocks, usageOf(s, key))
		}
		for o := range b.Allocations {
			hold := b.holder(o)
			if hold == nil {
				continue
			}
			var reason string
			switch {
			case hold.Type == TypeTunnel && s.gone(hold.Node):
				reason = fmt.Sprintf("tunnel address of deleted node %q", hold.Node)
			case hold.Type == TypeTunnel && s.nodes[hold.Node] != nil && !slices.Contains(tunnelAddrs(s.nodes[hold.Node]), b.addr(o)):
				reason = fmt.Sprintf("tunnel address node %q no longer uses (its Node names %s)", hold.Node, namesOf(tunnelAddrs(s.nodes[hold.Node])))
			case hold.Type != TypeTunnel && !eps.handleUsed(x, hold.Handle) && !eps.ipUsed(i, o):
				reason = fmt.Sprintf("no workload endpoint uses handle %q", hold.Handle)
			default:
				continue
			}
			if now.Sub(time.UnixMilli(b.AllocatedAt[o])) < grace {
				r.YoungLeaks++
				continue
			}
			r.Leaks = append(r.Leaks, Leak{Allocation: *allocationAt(b, o), Reason: reason})
		}
	}
	for _, a := range s.sortedAffinities() {
		if s.danglingAffinity(a) && (a.rec.State != StatePending || now.Sub(a.rec.Since) >= grace) {
			r.DanglingAffinities = append(r.DanglingAffinities, Affinity{Node: a.node, CIDR: a.cidr, State: a.rec.State})
		}
	}
	for _, f := range s.handleFindings() {
		if f.want == nil {
			r.EmptyHandles = append(r.EmptyHandles, f.id)
		}
	}
	return r
}

// GC frees what Check finds, leaving anything younger than grace alone:
// it repairs handle records from the blocks (the blocks are the truth),
// deletes empty handles and dangling affinities, releases leaked
// addresses (by sequence number, so an address reallocated meanwhile is
// never freed), then removes the now-empty blocks of deleted nodes and
// releases the affinity of blocks that stayed empty longer than the
// Client's empty-block grace period. Every change is conditional on the
// state Check saw; what lost a race is left for the next run.
func (c *Client) GC(ctx context.Context, grace time.Duration) (*Report, error) {
	// Blocks a routed older than layout 2 stored whole since the
	// layout changed (during an upgrade) move first.
	if n, err := c.moveLegacy(ctx); err != nil {
		return nil, err
	} else if n > 0 {
		log.WithField("blocks", n).Info("IPAM GC moved blocks stored in the layout before 2")
	}
	s, err := c.snapshot(ctx, true)
	if err != nil {
		return nil, err
	}
	s.reclaimable = c.reclaimable
	r := s.check(c.now(), grace)
	// fail records a failed step; it reports whether GC must stop: a
	// fenced write means this process is no longer the GC leader, or
	// the datastore is no longer the one it judged trusted.
	// fenced is the first such error, returned as it is: it says which
	// fence broke (the election, or the cluster identity).
	var fenced error
	fail := func(what string, err error) bool {
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", what, err))
			log.WithError(err).Warn("IPAM GC step failed: " + what)
		}
		if errors.Is(err, datastore.ErrFenced) {
			fenced = err
			return true
		}
		return false
	}
	if fail("repairing handles", c.repairHandles(ctx, s, r)) ||
		fail("repairing blocks without affinity", c.repairBlockAffinities(ctx, s, r)) {
		return r, fenced
	}
	for _, a := range r.DanglingAffinities {
		akey, bkey := affinityKey(a.Node, a.CIDR), blockKey(a.CIDR)
		ok, err := c.casOK(ctx, []write{{key: akey, rev: s.affs[akey].rev}, {key: bkey, rev: s.blocks[bkey].rev, guard: true}})
		if fail("deleting affinity "+akey, err) {
			return r, fenced
		}
		if ok {
			r.RemovedAffinities = append(r.RemovedAffinities, a)
		}
	}
	var rels []Release
	for _, l := range r.Leaks {
		if r.Held != "" && l.Type != TypeTunnel {
			continue // a record that cannot be read may name it
		}
		rels = append(rels, Release{IP: l.IP, Seq: l.Seq})
	}
	released, err := c.ReleaseIPs(ctx, rels...)
	r.Released = released
	var stale *StaleSequenceError
	if !errors.As(err, &stale) && fail("releasing leaked addresses", err) { // a stale release is a race GC lost, not a failure
		return r, fenced
	}

	// Re-read: the releases may have emptied blocks of deleted nodes.
	s2, err := c.blocksAndNodes(ctx)
	if err != nil {
		fail("re-reading", err)
		return r, nil
	}
	s2.reclaimable = c.reclaimable
	removed, err := c.releaseEmpty(ctx, s2, "", true)
	r.RemovedBlocks = append(r.RemovedBlocks, removed...)
	if fail("releasing empty blocks", err) {
		return r, fenced
	}
	return r, nil
}

// casOK is cas for callers that only care whether it applied.
func (c *Client) casOK(ctx context.Context, ws []write, extra ...clientv3.Cmp) (bool, error) {
	res, err := c.cas(ctx, ws, extra...)
	return res.ok, err
}

// repairHandles makes every handle record say what the blocks say,
// deleting records of handles that hold nothing. Each write is guarded on
// the blocks involved not having changed since the snapshot.
func (c *Client) repairHandles(ctx context.Context, s *snapshot, r *Report) error {
	found := s.handleFindings()
	var errs []error
	for _, f := range found {
		if f.want != nil {
			continue
		}
		ok, err := c.casOK(ctx, []write{{key: handleKey(f.id), rev: f.rev}})
		errs = append(errs, err)
		if ok {
			c.handles.drop(handleKey(f.id))
			r.RemovedHandles = append(r.RemovedHandles, f.id)
		}
	}
	for _, f := range found {
		if f.want == nil {
			continue
		}
		ws := []write{{key: handleKey(f.id), rev: f.rev, val: f.want.encode()}}
		for cidr := range f.want.Blocks {
			p, _ := netip.ParsePrefix(cidr)
			ws = append(ws, write{key: blockKey(p), rev: s.blocks[blockKey(p)].rev, guard: true})
		}
		ok, err := c.casOK(ctx, ws)
		errs = append(errs, err)
		if ok {
			c.handles.drop(handleKey(f.id))
			r.Repaired = append(r.Repaired, fmt.Sprintf("rewrote handle %q from its blocks", f.id))
		}
	}
	return errors.Join(errs...)
}

// repairBlockAffinities gives a block whose affinity record is missing a
// confirmed one if its node exists, and deletes it if its node is gone
// and nothing in it is allocated.
func (c *Client) repairBlockAffinities(ctx context.Context, s *snapshot, r *Report) error {
	var errs []error
	for _, key := range s.sortedBlocks() {
		bkv := s.blocks[key]
		b := bkv.b
		if _, ok := s.affinityOf(b); ok || b.owner() == "" {
			continue
		}
		akey := affinityKey(b.owner(), b.prefix)
		switch {
		case s.nodes[b.owner()] != nil:
			ok, err := c.casOK(ctx, []write{{key: akey, rev: 0, val: encodeAffinity(StateConfirmed, c.now())}, {key: key, rev: bkv.rev, guard: true}})
			errs = append(errs, err)
			if ok {
				r.Repaired = append(r.Repaired, fmt.Sprintf("recreated affinity of block %s for node %s", b.CIDR, b.owner()))
			}
		case b.inUse() == 0 && s.gone(b.owner()):
			ok, err := c.casOK(ctx, []write{{key: key, rev: bkv.rev}, {key: akey, rev: 0, guard: true}})
			errs = append(errs, err)
			if ok {
				c.blocks.drop(key)
				r.RemovedBlocks = append(r.RemovedBlocks, b.prefix)
			}
		}
	}
	return errors.Join(errs...)
}

// tunnelAddrs are the tunnel addresses a Node record names: IPIP, VXLAN
// and IPv6 VXLAN, each only if set.
func tunnelAddrs(n *api.Node) []netip.Addr {
	var out []netip.Addr
	if n.Spec.BGP != nil {
		if a, err := netip.ParseAddr(n.Spec.BGP.IPv4IPIPTunnelAddr); err == nil {
			out = append(out, a)
		}
	}
	for _, s := range []string{n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr} {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	// The WireGuard devices' addresses are tunnel allocations too
	// (routed/tunneladdr).
	for _, v6 := range []bool{false, true} {
		if a, ok := n.WireguardAddress(v6); ok {
			out = append(out, a)
		}
	}
	return out
}

// namesOf lists addresses for a message ("none" when empty).
func namesOf(as []netip.Addr) string {
	if len(as) == 0 {
		return "none"
	}
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.String()
	}
	return strings.Join(parts, " and ")
}
