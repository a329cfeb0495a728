package policy

import (
	"iter"
	"net/netip"
	"slices"
)

// addrIndex finds the endpoints and network sets holding an address
// without walking all of them: a model that names every new
// connection's ends (felix/policy/flowrec) holds a whole cluster's
// endpoints, and a walk per connection would cost milliseconds at
// 150,000. Single-address prefixes (a pod's /32 or /128) are kept by
// address; wider ones (rare) in a list that is walked. Only models
// keep one (NewModel); the calculator that programs the kernel walks,
// as it answers only routedctl's occasional explain.
type addrIndex struct {
	eps  byAddr[*endpoint]
	sets byAddr[*netset]
}

func newAddrIndex() *addrIndex {
	return &addrIndex{eps: newByAddr[*endpoint](), sets: newByAddr[*netset]()}
}

// byAddr keeps values by the single addresses of their prefixes, and
// the values with a wider prefix apart. An address nearly always has
// one value: it is kept in one, the others (rare) in more.
type byAddr[T comparable] struct {
	one  map[netip.Addr]T
	more map[netip.Addr][]T
	wide map[T]struct{}
}

func newByAddr[T comparable]() byAddr[T] {
	return byAddr[T]{one: map[netip.Addr]T{}, more: map[netip.Addr][]T{}, wide: map[T]struct{}{}}
}

func isSingle(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() }

func (x byAddr[T]) add(ps iter.Seq[netip.Prefix], v T) {
	for p := range ps {
		if !isSingle(p) {
			x.wide[v] = struct{}{}
			continue
		}
		a := p.Addr()
		if _, taken := x.one[a]; taken {
			x.more[a] = append(x.more[a], v)
		} else {
			x.one[a] = v
		}
	}
}

func (x byAddr[T]) remove(ps iter.Seq[netip.Prefix], v T) {
	for p := range ps {
		if !isSingle(p) {
			delete(x.wide, v)
			continue
		}
		a := p.Addr()
		rest := x.more[a]
		if o, ok := x.one[a]; ok && o == v {
			if len(rest) == 0 {
				delete(x.one, a)
				continue
			}
			x.one[a], rest = rest[0], rest[1:]
		} else if i := slices.Index(rest, v); i >= 0 {
			rest = slices.Delete(rest, i, i+1)
		}
		if len(rest) > 0 {
			x.more[a] = slices.Clip(rest)
		} else {
			delete(x.more, a)
		}
	}
}

// at yields the values with the single address a.
func (x byAddr[T]) at(a netip.Addr) iter.Seq[T] {
	return func(yield func(T) bool) {
		if v, ok := x.one[a]; !ok || !yield(v) {
			return
		}
		for _, v := range x.more[a] {
			if !yield(v) {
				return
			}
		}
	}
}

func (x *addrIndex) addEndpoint(e *endpoint)    { x.eps.add(e.prefixes(), e) }
func (x *addrIndex) removeEndpoint(e *endpoint) { x.eps.remove(e.prefixes(), e) }
func (x *addrIndex) addNetset(s *netset)        { x.sets.add(slices.Values(s.Nets), s) }
func (x *addrIndex) removeNetset(s *netset)     { x.sets.remove(slices.Values(s.Nets), s) }

// endpoint is findAt's answer: of the endpoints with a prefix holding
// addr (host endpoints only if hosts), the one with the lowest key.
func (x *addrIndex) endpoint(addr netip.Addr, hosts bool) *endpoint {
	var found *endpoint
	pick := func(e *endpoint) {
		if (hosts || !IsHostEndpointKey(e.key)) && (found == nil || e.key < found.key) {
			found = e
		}
	}
	for e := range x.eps.at(addr) {
		pick(e)
	}
	for e := range x.eps.wide {
		for p := range e.prefixes() {
			if !isSingle(p) && p.Contains(addr) {
				pick(e)
			}
		}
	}
	return found
}

// netset is NetworkSetAt's answer: the longest prefix holding addr,
// ties by key; with the prefix that matched.
func (x *addrIndex) netset(addr netip.Addr) (best *netset, net netip.Prefix) {
	bits := -1
	consider := func(s *netset, n netip.Prefix) {
		if n.Bits() > bits || (n.Bits() == bits && s.Key < best.Key) {
			best, net, bits = s, n, n.Bits()
		}
	}
	for s := range x.sets.at(addr) {
		consider(s, netip.PrefixFrom(addr, addr.BitLen()))
	}
	if best != nil {
		return best, net // nothing wider beats a single address
	}
	for s := range x.sets.wide {
		for _, n := range s.Nets {
			if !isSingle(n) && n.Contains(addr) {
				consider(s, n)
			}
		}
	}
	return best, net
}
