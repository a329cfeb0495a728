package nftdp

import (
	"encoding/binary"
	"iter"
)

// memberMap is a map keyed by members, as the desired sets' reference
// counts and the programmed sets' elements keep them: IPv4 members (all
// of a cluster's pods in an IPv4 cluster) packed into 8 bytes, the
// others by their mkey (22). A set can hold a cluster's worth of pods in
// both states, and a map slot of an mkey and an int32 takes 28 bytes, of
// an mkey alone 22, against 16 and 8 packed (issue 36: 150,000 remote
// endpoints kept 24.7 MiB of these maps; packed, felix's live heap in
// BenchmarkRemoteEndpoints fell from 91.1 to 81.4 MiB). The zero value
// is empty and ready.
type memberMap[V any] struct {
	v4 map[uint64]V
	v6 map[mkey]V // IPv6 members and the zero prefix
}

// pack4 is an IPv4 mkey in 8 bytes: address, prefix length (at most
// 32), protocol, port. The mkey of an IPv4 member always holds its
// address as As16 makes it (::ffff:a.b.c.d), so unpack4 gives it back
// whole.
func pack4(k mkey) uint64 {
	return uint64(binary.BigEndian.Uint32(k.addr[12:]))<<32 | uint64(k.bits)<<24 | uint64(k.proto)<<16 | uint64(k.port)
}

func unpack4(p uint64) mkey {
	k := mkey{fam: 4, bits: uint8(p >> 24), proto: uint8(p >> 16), port: uint16(p)}
	k.addr[10], k.addr[11] = 0xff, 0xff
	binary.BigEndian.PutUint32(k.addr[12:], uint32(p>>32))
	return k
}

func (m *memberMap[V]) get(k mkey) (V, bool) {
	var v V
	var ok bool
	if k.fam == 4 {
		v, ok = m.v4[pack4(k)]
	} else {
		v, ok = m.v6[k]
	}
	return v, ok
}

// has reports whether k is in m.
func (m *memberMap[V]) has(k mkey) bool {
	_, ok := m.get(k)
	return ok
}

func (m *memberMap[V]) put(k mkey, v V) {
	if k.fam == 4 {
		if m.v4 == nil {
			m.v4 = map[uint64]V{}
		}
		m.v4[pack4(k)] = v
		return
	}
	if m.v6 == nil {
		m.v6 = map[mkey]V{}
	}
	m.v6[k] = v
}

func (m *memberMap[V]) del(k mkey) {
	if k.fam == 4 {
		delete(m.v4, pack4(k))
	} else {
		delete(m.v6, k)
	}
}

func (m *memberMap[V]) len() int { return len(m.v4) + len(m.v6) }

// clear empties m, keeping its maps' room for the same members again.
func (m *memberMap[V]) clear() {
	clear(m.v4)
	clear(m.v6)
}

// all yields every member and its value, in no order; m must not change
// meanwhile.
func (m *memberMap[V]) all() iter.Seq2[mkey, V] {
	return func(yield func(mkey, V) bool) {
		for p, v := range m.v4 {
			if !yield(unpack4(p), v) {
				return
			}
		}
		for k, v := range m.v6 {
			if !yield(k, v) {
				return
			}
		}
	}
}
