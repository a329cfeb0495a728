package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Extra is a caller's keys written in the same etcd transaction as an
// assignment (AssignArgs.Extra) or a release (ReleaseByHandleWith), so
// that both land or neither does. routed's CNI service writes a pod's
// WorkloadEndpoint with its addresses this way: one transaction per ADD
// and one per DEL, and never an endpoint naming an address its handle
// does not hold.
type Extra interface {
	// Writes returns the keys to write in the transaction that leaves
	// the handle holding addrs (nil for a release). It is called again
	// for every attempt, after Observe has reported what changed.
	Writes(addrs []netip.Addr) ([]ExtraWrite, error)
	// Observe is given the current value (nil: absent) of every key
	// Writes returned, after an attempt that lost to another writer.
	Observe(key string, kv *mvccpb.KeyValue) error
}

// ExtraWrite is one key of an Extra.
type ExtraWrite struct {
	Key string
	// Rev is the ModRevision Key must still have (0: must not exist),
	// unless AnyRev is set.
	Rev    int64
	AnyRev bool
	// Value is the new value; nil deletes the key, unless Guard is set.
	Value []byte
	// Guard only compares Rev and leaves the key alone.
	Guard bool
}

// ExtraCommitted is what an Extra's successful transaction reports:
// the revision it was committed at (the ModRevision of every key it
// wrote). Extras that need it implement this.
type ExtraCommitted interface {
	Committed(rev int64)
}

// extraWrites turns e's writes for addrs into cas writes.
func extraWrites(e Extra, addrs []netip.Addr) ([]write, error) {
	if e == nil {
		return nil, nil
	}
	ews, err := e.Writes(addrs)
	if err != nil {
		return nil, err
	}
	ws := make([]write, len(ews))
	for i, w := range ews {
		if w.Key == "" {
			return nil, fmt.Errorf("%w: extra write without a key", ErrInvalidArgument)
		}
		ws[i] = write{key: w.Key, rev: w.Rev, anyRev: w.AnyRev, val: w.Value, guard: w.Guard}
	}
	return ws, nil
}

// observeExtra reports the current values of e's keys after a lost cas.
func observeExtra(e Extra, ws []write, res casResult) error {
	for _, w := range ws {
		if err := e.Observe(w.key, res.cur[w.key]); err != nil {
			return err
		}
	}
	return nil
}

// committedExtra tells e the revision of the transaction that wrote it.
func committedExtra(e Extra, rev int64) {
	if c, ok := e.(ExtraCommitted); ok {
		c.Committed(rev)
	}
}

// writeExtraHeld writes e for addrs, which the handle at hkey already
// holds, in a transaction that requires the handle unchanged since hrev
// (a retried ADD whose assignment is already done, or a fixed address).
// If the handle changed meanwhile and no longer holds every one of addrs
// (released by a racing DEL or GC), it fails with ErrReleased rather
// than write what names addresses nobody holds.
func (c *Client) writeExtraHeld(ctx context.Context, hkey string, hrev int64, addrs []netip.Addr, e Extra) error {
	tries := c.retries("writing with handle " + hkey)
	for {
		ews, err := extraWrites(e, addrs)
		if err != nil {
			return err
		}
		res, err := c.cas(ctx, append([]write{{key: hkey, rev: hrev, guard: true}}, ews...))
		if err != nil {
			return err
		}
		if res.ok {
			committedExtra(e, res.rev)
			return nil
		}
		h, err := c.storeHandleKV(hkey, res.cur[hkey])
		if err != nil {
			return err
		}
		hrev = modRev(res.cur[hkey])
		for _, a := range addrs {
			if !h.holds(a) {
				return fmt.Errorf("%w: handle %s no longer holds %s", ErrReleased, hkey, a)
			}
		}
		if err := observeExtra(e, ews, res); err != nil {
			return err
		}
		if _, err := tries.lost(ctx); err != nil {
			return err
		}
	}
}

// holds reports whether the handle record lists a.
func (h *handleRec) holds(a netip.Addr) bool {
	if h == nil {
		return false
	}
	for cidr, ords := range h.Blocks {
		p, err := netip.ParsePrefix(cidr)
		if err != nil || !p.Contains(a) {
			continue
		}
		if slices.Contains(ords, addrOffset(p.Addr(), a)) {
			return true
		}
	}
	return false
}
