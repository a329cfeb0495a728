package ipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// Sentinel errors; test with errors.Is. Messages built on them always
// say which pool, node, address or handle they are about.
var (
	// ErrExhausted means no address could be found for the request.
	ErrExhausted = errors.New("ipam: no free addresses")
	// ErrContention means optimistic writes kept conflicting with other
	// writers for the whole retry budget (WithRetryBudget).
	ErrContention = errors.New("ipam: too much contention")
	// ErrNoPool means no IP pool is usable for the request.
	ErrNoPool = errors.New("ipam: no usable IP pool")
	// ErrNotInPool means a requested address lies outside every pool.
	ErrNotInPool = errors.New("ipam: address is not in any IP pool")
	// ErrInUse means a requested address is held by another handle.
	ErrInUse = errors.New("ipam: address already allocated")
	// ErrNotAllocated means an address is not allocated.
	ErrNotAllocated = errors.New("ipam: address not allocated")
	// ErrStaleSequence means a release named an allocation that has since
	// been freed and possibly handed out again; nothing was released.
	ErrStaleSequence = errors.New("ipam: stale sequence number")
	// ErrInvalidArgument means the request itself is malformed.
	ErrInvalidArgument = errors.New("ipam: invalid argument")
	// ErrReleased means a handle was released while the caller was
	// writing something that names its addresses (AssignArgs.Extra).
	ErrReleased = errors.New("ipam: handle released meanwhile")
	// ErrCorrupt means a stored IPAM record could not be read.
	ErrCorrupt = errors.New("ipam: corrupt record")
)

// StaleSequenceError is returned for a release whose sequence number does
// not match the allocation currently at that address: the address was
// freed and reallocated in between, so releasing it would free somebody
// else's address.
type StaleSequenceError struct {
	IP netip.Addr
	// Want is the sequence number the caller gave; Have is the current one
	// (0 when the address is free now).
	Want, Have uint64
}

// Error says which address and which sequence numbers.
func (e *StaleSequenceError) Error() string {
	if e.Have == 0 {
		return fmt.Sprintf("%v: %s was released since sequence %d; refusing to release it", ErrStaleSequence, e.IP, e.Want)
	}
	return fmt.Sprintf("%v: %s was reallocated (sequence %d, release named %d); refusing to release it", ErrStaleSequence, e.IP, e.Have, e.Want)
}

// Unwrap makes errors.Is(err, ErrStaleSequence) true.
func (e *StaleSequenceError) Unwrap() error { return ErrStaleSequence }
