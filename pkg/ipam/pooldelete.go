package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// ErrPoolInUse means a pool still has allocated addresses, so deleting it
// would leave pods holding addresses no pool contains.
var ErrPoolInUse = errors.New("ipam: IP pool still has allocated addresses")

// PoolInUseError says how much of a pool is still allocated.
type PoolInUseError struct {
	Pool string
	// Addresses are allocated in Blocks blocks inside the pool's cidr.
	Addresses, Blocks int
}

// Error names the pool, the counts and the way out.
func (e *PoolInUseError) Error() string {
	return fmt.Sprintf("IPPool %q still has %d address(es) allocated in %d block(s): its pods would keep addresses no pool holds. "+
		"Set disabled: true on it, move or delete its pods (routedctl ipam show --show-blocks lists its blocks), then delete it; "+
		"or delete it anyway with --force", e.Pool, e.Addresses, e.Blocks)
}

// Unwrap makes errors.Is(err, ErrPoolInUse) true.
func (e *PoolInUseError) Unwrap() error { return ErrPoolInUse }

// DeletePool deletes the IP pool name. Unless force is set it refuses,
// with a PoolInUseError, while any block inside the pool's cidr (of any
// size: blocks carved before a blockSize change count too) has an
// address allocated. The delete is conditional on the pool and every
// block being as counted, so an address allocated after the count makes
// it count again instead of slipping through.
func (c *Client) DeletePool(ctx context.Context, name string, force bool) error {
	tries := c.retries("deleting IP pool " + name)
	for {
		// A block an older routed stored whole (during an upgrade) is
		// moved first, so that it is counted and guarded; one stored so
		// after this (the guard below covers its key too) reads again.
		if _, err := c.moveLegacy(ctx); err != nil {
			return err
		}
		s, err := c.snapshot(ctx, false)
		if err != nil {
			return err
		}
		ok, err := c.deletePoolAt(ctx, s, name, force)
		if err != nil || ok {
			return err
		}
		if _, err := tries.lost(ctx); err != nil {
			return err
		}
	}
}

// deletePoolAt deletes the pool as snapshot s saw it; false means
// something changed since and the caller should read again.
func (c *Client) deletePoolAt(ctx context.Context, s *snapshot, name string, force bool) (bool, error) {
	var pool *poolInfo
	for _, key := range s.legacy {
		// A block stored whole since the move (an older node's claim
		// during the upgrade): moved and counted at the next read.
		p, err := parseBlockKey(key)
		if _, both := s.blocks[blockKey(p)]; err != nil || both {
			continue // stored both ways: counted by its block (Check reports it)
		}
		for _, pool := range s.view.pools {
			if pool.name() == name && pool.prefix.Overlaps(p) {
				return false, nil
			}
		}
	}
	for _, p := range s.view.pools {
		if p.name() == name {
			pool = p
		}
	}
	if pool == nil {
		// Absent, or stored but unreadable (then only --force removes it).
		_, err := c.ds.Get(ctx, api.KindIPPool, name)
		switch {
		case err != nil:
			return false, err
		case !force:
			return false, fmt.Errorf("%w: IPPool %q cannot be read, so its allocations cannot be counted; delete it with --force", ErrCorrupt, name)
		}
		return true, c.ds.Delete(ctx, api.KindIPPool, name, "")
	}
	var extra []clientv3.Cmp
	if !force {
		inUse := &PoolInUseError{Pool: name}
		for _, key := range s.sortedBlocks() {
			b := s.blocks[key].b
			if n := b.inUse(); n > 0 && pool.prefix.Overlaps(b.prefix) {
				inUse.Addresses += n
				inUse.Blocks++
			}
		}
		if inUse.Addresses > 0 {
			return false, inUse
		}
		extra = append(extra, clientv3.Compare(clientv3.ModRevision(blockKeysWithin(pool.prefix)).WithPrefix(), "<", s.rev+1),
			clientv3.Compare(clientv3.ModRevision(summaryKeyOf(blockKeysWithin(pool.prefix))).WithPrefix(), "<", s.rev+1))
	}
	return c.casOK(ctx, []write{{key: poolKey(name), rev: pool.rev}}, extra...)
}

// blockKeysWithin returns a key prefix that every block key inside p
// starts with: the dotted octets p fixes whole (10.4.0.0/20 -> "10.4.").
// Blocks of other pools outside it then do not disturb a guard on it.
// IPv6 addresses are written compressed in keys, so no fixed text
// starts them all: for an IPv6 pool the guard covers every block.
func blockKeysWithin(p netip.Prefix) string {
	if !p.Addr().Is4() {
		return blockPrefix
	}
	a := p.Addr().As4()
	whole := p.Bits() / 8
	parts := make([]string, whole)
	for i := range whole {
		parts[i] = strconv.Itoa(int(a[i]))
	}
	if whole == 4 {
		return blockPrefix + strings.Join(parts, ".") + "-"
	}
	return blockPrefix + strings.Join(parts, ".") + "."
}
