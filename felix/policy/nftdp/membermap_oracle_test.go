package nftdp

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// reviewMembers: a pool of members that differ only in family, mapping,
// prefix length, protocol or port.
func reviewMembers() []Member {
	var ms []Member
	addrs := []string{"0.0.0.0", "10.0.0.1", "10.0.0.0", "255.255.255.255", "1.2.3.4",
		"::ffff:10.0.0.1", "::ffff:0.0.0.0", "::ffff:255.255.255.255", "::a00:1", "::", "fd00::1", "ffff::"}
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		for _, bits := range []int{0, 1, 8, 24, 31, 32, 33, 96, 104, 127, 128} {
			p := netip.PrefixFrom(a, bits)
			if !p.IsValid() {
				continue
			}
			for _, pp := range [][2]int{{0, 0}, {6, 80}, {17, 80}, {6, 65535}, {132, 1}, {255, 0}, {0, 1}} {
				ms = append(ms, Member{Prefix: p.Masked(), Proto: uint8(pp[0]), Port: uint16(pp[1])})
				ms = append(ms, Member{Prefix: p, Proto: uint8(pp[0]), Port: uint16(pp[1])})
			}
		}
	}
	ms = append(ms, Member{}, Member{Proto: 6, Port: 80})
	// an invalid prefix with a valid address (bits 255 in the key)
	ms = append(ms, Member{Prefix: netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 33)})
	ms = append(ms, Member{Prefix: netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), -1), Proto: 6})
	return ms
}

// TestMemberMapIsAMap: a memberMap behaves exactly as a map[mkey]
// under random puts and deletions, and all() yields exactly its keys.
func TestMemberMapIsAMap(t *testing.T) {
	ms := reviewMembers()
	// distinct keys must stay distinct
	keys := map[mkey]bool{}
	for _, m := range ms {
		keys[m.key()] = true
	}
	var mm memberMap[int32]
	ref := map[mkey]int32{}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 200000 {
		m := ms[rng.IntN(len(ms))]
		k := m.key()
		switch rng.IntN(3) {
		case 0, 1:
			v := int32(rng.IntN(5) + 1)
			mm.put(k, v)
			ref[k] = v
		case 2:
			mm.del(k)
			delete(ref, k)
		}
		if step%997 == 0 || step == 199999 {
			if mm.len() != len(ref) {
				t.Fatalf("step %d: len %d, ref %d", step, mm.len(), len(ref))
			}
			seen := map[mkey]int32{}
			for k, v := range mm.all() {
				if _, dup := seen[k]; dup {
					t.Fatalf("all() yielded %v twice", k.member())
				}
				seen[k] = v
			}
			for k, v := range ref {
				if seen[k] != v {
					t.Fatalf("step %d: all() %v = %d, want %d", step, k.member(), seen[k], v)
				}
			}
			if len(seen) != len(ref) {
				t.Fatalf("step %d: all() gave %d, ref %d", step, len(seen), len(ref))
			}
			for k := range keys {
				v, ok := mm.get(k)
				rv, rok := ref[k]
				if v != rv || ok != rok || mm.has(k) != rok {
					t.Fatalf("step %d: get(%v) = %d %v, want %d %v", step, k.member(), v, ok, rv, rok)
				}
			}
		}
	}
	mm.clear()
	if mm.len() != 0 {
		t.Fatal("not empty after clear")
	}
	for k := range keys {
		if mm.has(k) {
			t.Fatal("has after clear")
		}
	}
}

// TestMemberRefCountsMatchAMap: AddMember/RemoveMember on the desired state keep
// reference counts exactly as a map[mkey]int32 would, never below zero,
// the member present exactly while its count is positive, and nets
// counted per family.
func TestMemberRefCountsMatchAMap(t *testing.T) {
	d := &Dataplane{sets: map[string]*setWant{}, dirtySets: map[string]map[mkey]bool{}}
	d.AddSet("s", AddrSet)
	ms := reviewMembers()
	ref := map[mkey]int32{}
	rng := rand.New(rand.NewPCG(5, 6))
	for step := range 100000 {
		m := ms[rng.IntN(len(ms))]
		mm := m
		mm.Prefix = mm.Prefix.Masked()
		k := mm.key()
		if rng.IntN(2) == 0 {
			d.AddMember("s", m)
			ref[k]++
		} else {
			d.RemoveMember("s", m)
			if ref[k] > 0 {
				ref[k]--
			}
			if ref[k] == 0 {
				delete(ref, k)
			}
		}
		s := d.sets["s"]
		if got, _ := s.members.get(k); got != ref[k] {
			t.Fatalf("step %d: %v count %d, want %d", step, mm, got, ref[k])
		}
		if step%1009 == 0 {
			if s.members.len() != len(ref) {
				t.Fatalf("len %d want %d", s.members.len(), len(ref))
			}
			var nets [2]int
			for k, v := range s.members.all() {
				if v <= 0 {
					t.Fatalf("%v count %d", k.member(), v)
				}
				if ref[k] != v {
					t.Fatalf("%v count %d want %d", k.member(), v, ref[k])
				}
				if p := k.member().Prefix; !p.IsSingleIP() {
					nets[famIdx(p)]++
				}
			}
			if nets != s.nets {
				t.Fatalf("step %d: nets %v, counted %v", step, s.nets, nets)
			}
		}
	}
}
