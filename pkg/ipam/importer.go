package ipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrImportConflict means routed already holds IPAM state for a block
// being imported, and it differs from what the import would write.
var ErrImportConflict = errors.New("ipam: import conflicts with existing state")

// ImportAllocation is one allocated address of an imported block.
type ImportAllocation struct {
	Ordinal   int
	Handle    string
	Namespace string
	Pod       string
	Node      string
	Type      string // TypePod or TypeTunnel
}

// ImportBlock is a block as another IPAM (Calico's) left it: confirmed
// for Node, with its allocations.
type ImportBlock struct {
	CIDR        netip.Prefix
	Node        string
	Allocations []ImportAllocation
}

// Import verdicts.
const (
	ImportCreate = "create"
	// ImportUpdate is a block routed holds from an earlier import, to
	// which the other IPAM has since allocated addresses routed's copy
	// has free: they are added, each with its handle.
	ImportUpdate   = "update"
	ImportSame     = "unchanged"
	ImportConflict = "conflict"
)

// ImportResult says what Import does (or did) with one block.
type ImportResult struct {
	CIDR   netip.Prefix
	Node   string
	Action string // ImportCreate, ImportUpdate, ImportSame or ImportConflict
	Detail string
	// added are the allocations an update adds.
	added []ImportAllocation
}

// Import writes imported blocks, each with its node's confirmed affinity
// and the handles of its allocations, so the addresses stay with the
// pods that hold them. Blocks whose handles are shared are written in one
// transaction, conditional on none of their keys existing. A block that
// routed already holds with the same node and allocations is left alone
// (importing twice changes nothing); one that holds every imported
// address the same way but has some still free gets those (the other
// IPAM allocated them since the last import); one that differs
// otherwise is a conflict. With
// dryRun, or when any block conflicts, nothing is written and the results
// say what would happen.
func (c *Client) Import(ctx context.Context, blocks []ImportBlock, dryRun bool) ([]ImportResult, error) {
	// A dry run still moves an old layout unless the caller marks ctx
	// ReadOnly (an operator's plan alone; a plan before a real import
	// must not be refused).
	if err := c.ensureLayout(ctx); err != nil {
		return nil, err
	}
	recs := make([]*block, len(blocks))
	results := make([]ImportResult, len(blocks))
	conflict := false
	for i, ib := range blocks {
		resp, err := c.get(ctx, blockKey(ib.CIDR))
		if err != nil {
			return nil, err
		}
		// Sequence numbers start at the revision read, as for a claim.
		b, err := importedBlock(ib, uint64(resp.Header.Revision), c.now())
		if err != nil {
			return nil, err
		}
		recs[i] = b
		results[i] = ImportResult{CIDR: ib.CIDR, Node: ib.Node, Action: ImportCreate}
		if len(resp.Kvs) == 0 {
			continue
		}
		cur, err := decodeBlock(resp.Kvs[0].Value)
		if err != nil {
			return nil, err
		}
		why, missing := sameAllocations(cur, b)
		switch {
		case why != "":
			results[i].Action, results[i].Detail = ImportConflict, why
			conflict = true
		case len(missing) > 0:
			for _, a := range ib.Allocations {
				if slices.Contains(missing, a.Ordinal) {
					results[i].added = append(results[i].added, a)
				}
			}
			results[i].Action = ImportUpdate
			results[i].Detail = fmt.Sprintf("%d address(es) allocated since the last import", len(missing))
		default:
			results[i].Action = ImportSame
		}
	}
	if dryRun || conflict {
		if conflict {
			return results, fmt.Errorf("%w: nothing was written (see the blocks marked conflict)", ErrImportConflict)
		}
		return results, nil
	}
	for _, group := range handleGroups(recs, results) {
		if err := c.importGroup(ctx, recs, group); err != nil {
			return results, err
		}
	}
	for _, r := range results {
		for _, a := range r.added {
			// AssignIP updates the block and the handle under their
			// revisions; asking again with the same handle succeeds, so
			// an interrupted import completes when run again.
			node := cmp.Or(a.Node, r.Node)
			if err := c.AssignIP(ctx, addrAt(r.CIDR, a.Ordinal), a.Handle, node, Attributes{Namespace: a.Namespace, Pod: a.Pod, Type: a.Type}); err != nil {
				return results, fmt.Errorf("ipam: import into %s: %w", r.CIDR, err)
			}
		}
	}
	return results, nil
}

// importGroup writes blocks[group...], their affinities and handles in
// one transaction that requires every key to be new.
func (c *Client) importGroup(ctx context.Context, blocks []*block, group []int) error {
	handles := map[string]*handleRec{}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, i := range group {
		b := blocks[i]
		bkey := blockKey(b.prefix)
		for _, key := range []string{bkey, summaryKeyOf(bkey), affinityKey(b.owner(), b.prefix)} {
			cmps = append(cmps, clientv3.Compare(clientv3.Version(key), "=", 0))
		}
		val := b.encode()
		sum, err := summarize(val)
		if err != nil {
			return fmt.Errorf("ipam: import of %s: %w", b.CIDR, err)
		}
		ops = append(ops,
			clientv3.OpPut(bkey, string(val)),
			clientv3.OpPut(summaryKeyOf(bkey), string(sum)),
			clientv3.OpPut(affinityKey(b.owner(), b.prefix), string(encodeAffinity(StateConfirmed, c.now()))))
		for o, a := range b.Allocations {
			if a == nil {
				continue
			}
			id := b.Attributes[*a].Handle
			h := handles[id]
			if h == nil {
				h = &handleRec{ID: id, Blocks: map[string][]int{}}
				handles[id] = h
			}
			h.add(b.CIDR, o)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(handles)) {
		cmps = append(cmps, clientv3.Compare(clientv3.Version(handleKey(id)), "=", 0))
		ops = append(ops, clientv3.OpPut(handleKey(id), string(handles[id].encode())))
	}
	resp, err := c.kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return c.ds.Wrap(err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: block %s or one of its handles was written meanwhile; run the import again", ErrImportConflict, blocks[group[0]].CIDR)
	}
	return nil
}

// handleGroups groups the blocks to create so that blocks sharing a
// handle are written together (a handle record lists all its blocks).
func handleGroups(blocks []*block, results []ImportResult) [][]int {
	parent := make([]int, len(blocks))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			i = parent[i]
		}
		return i
	}
	owner := map[string]int{}
	for i, b := range blocks {
		if results[i].Action != ImportCreate {
			continue
		}
		for _, a := range b.Attributes {
			if j, ok := owner[a.Handle]; ok {
				parent[find(i)] = find(j)
			} else {
				owner[a.Handle] = i
			}
		}
	}
	groups := map[int][]int{}
	var roots []int
	for i := range blocks {
		if results[i].Action != ImportCreate {
			continue
		}
		r := find(i)
		if _, ok := groups[r]; !ok {
			roots = append(roots, r)
		}
		groups[r] = append(groups[r], i)
	}
	out := make([][]int, 0, len(roots))
	for _, r := range roots {
		out = append(out, groups[r])
	}
	return out
}

// importedBlock builds routed's record of an imported block.
func importedBlock(ib ImportBlock, seq uint64, now time.Time) (*block, error) {
	p := ib.CIDR.Masked()
	if p.Addr().Is4In6() || p.Addr().BitLen()-p.Bits() > 16 || p != ib.CIDR {
		return nil, fmt.Errorf("%w: imported block %s is not a block (/16 to /32, or /112 to /128 for IPv6)", ErrInvalidArgument, ib.CIDR)
	}
	if err := checkName("imported block's node", ib.Node); err != nil {
		return nil, err
	}
	b := newBlock(p, ib.Node, max(seq, 1), now)
	seen := map[int]bool{}
	for _, a := range ib.Allocations {
		if a.Ordinal < 0 || a.Ordinal >= b.size() || seen[a.Ordinal] {
			return nil, fmt.Errorf("%w: block %s: ordinal %d out of range or allocated twice", ErrInvalidArgument, p, a.Ordinal)
		}
		if err := checkName("handle", a.Handle); err != nil {
			return nil, err
		}
		seen[a.Ordinal] = true
		attr := attribute{Handle: a.Handle, Namespace: a.Namespace, Pod: a.Pod, Node: a.Node, Type: a.Type}
		idx := slices.Index(b.Attributes, attr)
		if idx < 0 {
			b.Attributes = append(b.Attributes, attr)
			idx = len(b.Attributes) - 1
		}
		b.Allocations[a.Ordinal] = &idx
		b.Seq[a.Ordinal] = b.SequenceNumber
		b.AllocatedAt[a.Ordinal] = now.UnixMilli()
	}
	b.Unallocated = slices.DeleteFunc(b.Unallocated, func(o int) bool { return seen[o] })
	if len(seen) > 0 {
		b.EmptySince = nil
	}
	return b, nil
}

// sameAllocations says how cur differs from the imported b ("" if it is
// the same node's and holds every imported address it has allocated with
// the same handle), and lists the imported ordinals cur has free.
// Addresses routed allocated since an earlier import are routed's own:
// they do not make a difference.
func sameAllocations(cur, b *block) (string, []int) {
	if cur.Affinity != b.Affinity {
		return fmt.Sprintf("routed has it for %s, the import for %s", cur.owner(), b.owner()), nil
	}
	var missing []int
	for o, a := range b.Allocations {
		if a == nil {
			continue
		}
		c := cur.Allocations[o]
		if c == nil {
			missing = append(missing, o)
			continue
		}
		if have, want := cur.Attributes[*c].Handle, b.Attributes[*a].Handle; have != want {
			return fmt.Sprintf("%s: routed has handle %q, the import %q", b.addr(o), have, want), nil
		}
	}
	return "", missing
}
