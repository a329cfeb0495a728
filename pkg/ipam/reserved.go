package ipam

import (
	"encoding/json"
	"net/netip"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// IPReservations (api.IPReservation) keep addresses out of automatic
// assignment, as Calico's do: AutoAssign never hands out a reserved
// address, skips a block whose free addresses are all reserved (it
// claims or borrows another), and never claims a block that is reserved
// whole. AssignIP, which is given its address, does not consult them:
// in Calico too a reservation only stops IPAM from choosing the address
// itself (a re-imported pod keeps the address it holds). Addresses
// allocated before a reservation covered them stay allocated.
//
// Reservations are read with the pools, in the same request, into the
// cached clusterView, so the hot path costs nothing more than a look at
// the (few) reserved prefixes overlapping the block it allocates from.
// Every AutoAssign write also requires that no reservation changed since
// the view was read (reservedGuard): a reservation created meanwhile
// fails the write, and the retry reads the view again.

var reservationPrefix = datastore.KindPrefix(api.KindIPReservation)

// reservedRange is one reserved prefix and the reservation naming it.
type reservedRange struct {
	prefix netip.Prefix
	name   string
}

// reservedSet is every reserved prefix, sorted by address.
type reservedSet []reservedRange

// decodeReservations reads the reservations in kvs, skipping (loudly)
// any that do not decode.
func decodeReservations(kvs []*mvccpbKV) reservedSet {
	var out reservedSet
	for _, kv := range kvs {
		var r api.IPReservation
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable IPReservation")
			continue
		}
		for _, p := range r.ReservedPrefixes() {
			out = append(out, reservedRange{prefix: p, name: r.Metadata.Name})
		}
	}
	slices.SortFunc(out, func(a, b reservedRange) int { return a.prefix.Addr().Compare(b.prefix.Addr()) })
	return out
}

// in returns the reserved prefixes overlapping block (nil for almost
// every block).
func (s reservedSet) in(block netip.Prefix) reservedSet {
	var out reservedSet
	for _, r := range s {
		if r.prefix.Overlaps(block) {
			out = append(out, r)
		}
	}
	return out
}

// covers reports whether the reservations leave nothing of block free.
func (s reservedSet) covers(block netip.Prefix) bool {
	in := s.in(block)
	if len(in) == 0 {
		return false
	}
	for _, r := range in {
		if r.prefix.Bits() <= block.Bits() {
			return true
		}
	}
	// Smaller prefixes inside the block: count what they reserve.
	return len(in.ordinals(block)) == blockSize(block)
}

// ordinals returns the reserved ordinals of block (s is s.in(block)).
func (s reservedSet) ordinals(block netip.Prefix) map[int]bool {
	out := map[int]bool{}
	n := blockSize(block)
	for _, r := range s {
		if r.prefix.Bits() <= block.Bits() {
			for o := range n {
				out[o] = true
			}
			return out
		}
		first := ordinalIn(block, r.prefix.Addr())
		for o := first; o < first+(1<<(r.prefix.Addr().BitLen()-r.prefix.Bits())) && o < n; o++ {
			out[o] = true
		}
	}
	return out
}

// holding names the reservation holding ip, or "".
func (s reservedSet) holding(ip netip.Addr) string {
	for _, r := range s {
		if r.prefix.Contains(ip) {
			return r.name
		}
	}
	return ""
}

func blockSize(block netip.Prefix) int { return 1 << (block.Addr().BitLen() - block.Bits()) }

// ordinalIn is ip's ordinal in block (ip must lie in it).
func ordinalIn(block netip.Prefix, ip netip.Addr) int {
	a, b := block.Addr().As16(), ip.As16()
	o := 0
	for i := 0; i < 16; i++ {
		o = o<<8 | int(b[i]-a[i])
		if o > 1<<30 {
			return o // cannot happen inside a block; keeps o bounded
		}
	}
	return o
}

// usable counts b's free addresses that are not reserved.
func (s reservedSet) usable(b *block) int {
	in := s.in(b.prefix)
	if len(in) == 0 {
		return b.free()
	}
	res := in.ordinals(b.prefix)
	n := 0
	for _, o := range b.Unallocated {
		if !res[o] {
			n++
		}
	}
	return n
}

// reservedGuard is the condition every automatic assignment's write
// carries: no reservation was created or changed after rev, the
// revision the view was read at.
func reservedGuard(rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(reservationPrefix), "<", rev+1).WithPrefix()
}

// reservationsOp reads the reservations with the pools.
func reservationsOp() clientv3.Op {
	return clientv3.OpGet(reservationPrefix, clientv3.WithPrefix())
}

// allocateSkipping takes the first free ordinal (in free-list order) that
// is not reserved.
func (b *block) allocateSkipping(reserved map[int]bool, attr attribute, now time.Time) (int, bool) {
	if len(reserved) == 0 {
		return b.allocate(-1, attr, now)
	}
	for _, o := range b.Unallocated {
		if !reserved[o] {
			return b.allocate(o, attr, now)
		}
	}
	return 0, false
}

// noteReserved logs an address AssignIP handed out although a
// reservation holds it: allowed (the caller chose it), but worth saying.
func (c *Client) noteReserved(ip netip.Addr, handle string) {
	if v := c.view.Load(); v != nil {
		if name := v.reserved.holding(ip); name != "" {
			log.WithFields(map[string]any{"ip": ip.String(), "handle": handle, "reservation": name}).
				Info("assigned a reserved address on request: reservations keep addresses from automatic assignment only, as in Calico")
		}
	}
}
