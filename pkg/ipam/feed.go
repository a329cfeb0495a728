package ipam

import (
	"net/netip"
	"strings"
)

// AffinityHandler receives block affinities: a full snapshot first, then
// every change. After a resync a new snapshot replaces everything
// received before. Calls come from one goroutine, in datastore order.
type AffinityHandler interface {
	OnAffinitySnapshot(all []Affinity)
	// OnAffinityUpdate reports a created or changed affinity, or with
	// deleted set a removed one (its State is then empty).
	OnAffinityUpdate(a Affinity, deleted bool)
}

// BorrowHandler receives, per block, the addresses allocated to nodes
// other than the block's own (borrowed /32s) and the node holding each:
// a full snapshot first, then each block whose borrowed set changed.
// After a resync a new snapshot replaces everything. Calls come from one
// goroutine, in datastore order.
type BorrowHandler interface {
	OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string)
	// OnBorrowedBlock replaces the borrowed addresses of one block; an
	// empty map (block deleted or nothing borrowed) clears it.
	OnBorrowedBlock(block netip.Prefix, borrowed map[netip.Addr]string)
}

// IsAffinityKey reports whether key is a block affinity record.
func IsAffinityKey(key string) bool { return strings.HasPrefix(key, affinityPrefix) }

// AffinityKeyPrefix starts every block affinity's key (the node feed
// lists it alone).
const AffinityKeyPrefix = affinityPrefix

// BlockKeyPrefix starts every block summary's key (keys.go): the
// records of the blocks the node feed reads, inside the prefix it
// watches; the whole blocks are stored outside it.
const BlockKeyPrefix = summaryPrefix

// IsBlockKey reports whether key is a block summary's (or a block
// stored whole before layout 2).
func IsBlockKey(key string) bool { return strings.HasPrefix(key, summaryPrefix) }

// DecodeAffinity reads the affinity stored at key (for the node feed). A
// deleted affinity has no value and comes back with an empty State.
func DecodeAffinity(key string, value []byte, rev int64, deleted bool) (Affinity, error) {
	if deleted {
		node, cidr, err := parseAffinityKey(key)
		return Affinity{Node: node, CIDR: cidr}, err
	}
	a, err := parseAffinityKV(key, value, rev)
	if err != nil {
		return Affinity{}, err
	}
	return Affinity{Node: a.node, CIDR: a.cidr, State: a.rec.State}, nil
}

// DecodeBorrowed reads the block stored at key and returns its addresses
// allocated to nodes other than the block's own, with the node holding
// each (for the node feed). A deleted block borrows nothing.
func DecodeBorrowed(key string, value []byte, deleted bool) (netip.Prefix, map[netip.Addr]string, error) {
	p, br, _, err := DecodeBlock(key, value, deleted)
	return p, br, err
}
