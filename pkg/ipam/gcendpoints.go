package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// endpointMarks is what Check needs of the workload endpoints, kept per
// allocation and per problem found rather than per endpoint: a bit per
// address of every block and a flag per allocation, however many
// endpoints there are.
type endpointMarks struct {
	// handleNamed, per blockIndex.refs entry: an endpoint names the
	// allocation's handle.
	handleNamed []bool
	// ipNamed, per block (index order) and ordinal: an endpoint names the
	// address. ipTwice: more than one does (kept in the first block
	// holding the address).
	ipNamed, ipTwice [][]uint64
	// outside counts the endpoints naming each address no block holds.
	outside map[netip.Addr]int
	// blind counts the endpoint records that do not decode and of which
	// neither a handle nor an address can be read (salvage).
	blind      int
	shared     []SharedAddress
	mismatches []EndpointMismatch
}

// handleUsed reports whether an endpoint names handle.
func (m *endpointMarks) handleUsed(x *blockIndex, handle string) bool {
	lo, hi := x.group(handle)
	return lo < hi && m.handleNamed[lo]
}

// ipUsed reports whether an endpoint names ordinal o of block blk.
func (m *endpointMarks) ipUsed(blk, o int) bool {
	return m.ipNamed[blk][o/64]&(1<<(o%64)) != 0
}

// markIP counts one endpoint naming ip, held by the blocks cands.
func (m *endpointMarks) markIP(s *snapshot, cands []int32, ip netip.Addr) {
	if len(cands) == 0 {
		m.outside[ip]++
		return
	}
	for k, i := range cands {
		o, _ := s.blocks[s.idx.keys[i]].b.ordinal(ip)
		word, bit := o/64, uint64(1)<<(o%64)
		if k == 0 && m.ipNamed[i][word]&bit != 0 {
			m.ipTwice[i][word] |= bit
		}
		m.ipNamed[i][word] |= bit
	}
}

// sharedIPs lists the addresses more than one endpoint names.
func (m *endpointMarks) sharedIPs(s *snapshot) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for i, words := range m.ipTwice {
		b := s.blocks[s.idx.keys[i]].b
		for w, v := range words {
			for ; v != 0; v &= v - 1 {
				out[b.addr(w*64+bits.TrailingZeros64(v))] = nil
			}
		}
	}
	for ip, n := range m.outside {
		if n > 1 {
			out[ip] = nil
		}
	}
	return out
}

// scanEndpoints reads the workload endpoints page by page at s's
// revision and keeps, in s.eps, which handles and addresses they name,
// the addresses more than one names and the endpoints whose address IPAM
// does not hold for them. s's blocks must be read.
func (c *Client) scanEndpoints(ctx context.Context, s *snapshot) error {
	x := s.index()
	m := &endpointMarks{handleNamed: make([]bool, len(x.refs)), ipNamed: make([][]uint64, len(x.keys)),
		ipTwice: make([][]uint64, len(x.keys)), outside: map[netip.Addr]int{}}
	for i, key := range x.keys {
		n := (s.blocks[key].b.size() + 63) / 64
		m.ipNamed[i], m.ipTwice[i] = make([]uint64, n), make([]uint64, n)
	}
	prefix := datastore.KindPrefix(api.KindWorkloadEndpoint)
	err := c.pages(ctx, prefix, s.rev, endpointPage, func(kv *mvccpbKV) {
		var w api.WorkloadEndpoint
		if err := json.Unmarshal(kv.Value, &w); err != nil {
			s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", kv.Key, err))
			if !m.salvage(s, kv.Value) {
				m.blind++
			}
			return
		}
		if w.Spec.Handle != "" {
			lo, hi := x.group(w.Spec.Handle)
			for k := lo; k < hi; k++ {
				m.handleNamed[k] = true
			}
		}
		for _, n := range w.Spec.IPNetworks {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				continue
			}
			ip := p.Addr()
			cands := x.containing(ip)
			m.markIP(s, cands, ip)
			if why := s.heldFor(ip, &w, cands); why != "" {
				m.mismatches = append(m.mismatches, EndpointMismatch{Endpoint: w.Metadata.Name, Node: w.Spec.Node, IP: ip, Reason: why})
			}
		}
	})
	if err != nil {
		return err
	}
	// By address, each address's endpoints in key order: as one read of
	// every endpoint listed them.
	slices.SortStableFunc(m.mismatches, func(a, b EndpointMismatch) int { return a.IP.Compare(b.IP) })
	if shared := m.sharedIPs(s); len(shared) > 0 {
		if err := c.nameShared(ctx, s.rev, shared); err != nil {
			return err
		}
		for ip, names := range shared {
			sort.Strings(names)
			m.shared = append(m.shared, SharedAddress{IP: ip, Endpoints: names})
		}
		slices.SortFunc(m.shared, func(a, b SharedAddress) int { return a.IP.Compare(b.IP) })
	}
	s.eps = m
	return nil
}

// salvage marks the handle and the addresses an endpoint record that
// does not decode still says (decoded as the record is, each field
// only when it holds a valid value): its pod may be running, and what
// it holds must not be freed. It reports whether it read any.
func (m *endpointMarks) salvage(s *snapshot, v []byte) bool {
	var rec struct {
		Spec struct {
			Handle     json.RawMessage   `json:"handle"`
			IPNetworks []json.RawMessage `json:"ipNetworks"`
		} `json:"spec"`
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(v, &rec); err != nil && !errors.As(err, &typeErr) {
		return false
	}
	found := false
	var handle string
	if json.Unmarshal(rec.Spec.Handle, &handle) == nil && handle != "" {
		lo, hi := s.idx.group(handle)
		for k := lo; k < hi; k++ {
			m.handleNamed[k] = true
		}
		found = true
	}
	for _, r := range rec.Spec.IPNetworks {
		var n string
		if json.Unmarshal(r, &n) != nil {
			continue
		}
		ip, err := netip.ParseAddr(n)
		if p, perr := netip.ParsePrefix(n); perr == nil {
			ip, err = p.Addr(), nil
		}
		if err != nil {
			continue
		}
		ip = ip.Unmap() // as felix reads it
		if cands := s.idx.containing(ip); len(cands) > 0 {
			for _, i := range cands {
				o, _ := s.blocks[s.idx.keys[i]].b.ordinal(ip)
				m.ipNamed[i][o/64] |= 1 << (o % 64)
			}
		}
		found = true
	}
	return found
}

// nameShared reads the endpoints again, at rev, for the names of those
// naming the addresses in shared: a second pass only when two endpoints
// share an address, so the first keeps no name.
func (c *Client) nameShared(ctx context.Context, rev int64, shared map[netip.Addr][]string) error {
	return c.pages(ctx, datastore.KindPrefix(api.KindWorkloadEndpoint), rev, endpointPage, func(kv *mvccpbKV) {
		var w api.WorkloadEndpoint
		if json.Unmarshal(kv.Value, &w) != nil {
			return // listed as unreadable by the first pass
		}
		for _, n := range w.Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil {
				if names, ok := shared[p.Addr()]; ok {
					shared[p.Addr()] = append(names, w.Metadata.Name)
				}
			}
		}
	})
}

// heldFor says why ip is not allocated to endpoint w ("" when it is),
// given the blocks holding ip. With overlapping blocks any one holding it
// for w is enough.
func (s *snapshot) heldFor(ip netip.Addr, w *api.WorkloadEndpoint, cands []int32) string {
	var why []string
	for _, i := range cands {
		b := s.blocks[s.idx.keys[i]].b
		o, _ := b.ordinal(ip)
		h := b.holder(o)
		switch {
		case h == nil:
			why = append(why, fmt.Sprintf("not allocated in block %s", b.prefix))
		case w.Spec.Handle != "" && h.Handle != w.Spec.Handle:
			why = append(why, fmt.Sprintf("allocated to handle %q in block %s, endpoint names %q", h.Handle, b.prefix, w.Spec.Handle))
		case h.Node != "" && h.Node != w.Spec.Node:
			why = append(why, fmt.Sprintf("allocated for node %q in block %s, endpoint is on %q", h.Node, b.prefix, w.Spec.Node))
		default:
			return ""
		}
	}
	if len(why) == 0 {
		return "no IPAM block holds this address"
	}
	return strings.Join(why, "; ")
}
