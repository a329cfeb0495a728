package nftdp

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestSetKeysAndResyncedSets: the set dump reads the keys GetSetElements
// reads (address and named-port sets, both families, thousands of
// elements over many netlink messages), allocating per message and not
// per element; and a Resync, which now reads those sets that way, finds
// elements deleted from and added to them behind felix's back and puts
// them right, as real traffic shows, then writes nothing the next time.
func TestSetKeysAndResyncedSets(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-ka", "10.71.0.1", "fd00:71::1")
	b := node.AddPod(t, "cali-kb", "10.71.0.2", "fd00:71::2")
	c := node.AddPod(t, "cali-kc", "10.71.0.3", "fd00:71::3")
	polab.Serve(t, b.NS, 8080)

	conn, err := nftables.New(nftables.WithNetNSFd(node.Fd))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{NetnsFd: node.Fd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	host := func(a netip.Addr) Member { return Member{Prefix: netip.PrefixFrom(a, a.BitLen())} }
	d.AddSet("s-a", AddrSet)
	d.AddMember("s-a", host(a.IPv4))
	d.AddMember("s-a", host(a.IPv6))
	// Filler beyond one netlink message: 3,000 a family.
	for i := range 3000 {
		d.AddMember("s-a", host(netip.AddrFrom4([4]byte{10, 72, byte(i >> 8), byte(i)})))
		d.AddMember("s-a", host(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x72, 14: byte(i >> 8), 15: byte(i)})))
	}
	d.AddSet("n-a", NamedPortSet)
	d.AddMember("n-a", Member{Prefix: host(b.IPv4).Prefix, Proto: 6, Port: 8080})
	d.AddMember("n-a", Member{Prefix: host(b.IPv6).Prefix, Proto: 6, Port: 8080})
	d.AddMember("n-a", Member{Prefix: host(b.IPv4).Prefix, Proto: 17, Port: 53})
	d.SetChain("allow-all", []Rule{{Action: ActAccept}})
	d.SetChain("tw-b", []Rule{
		{ID: "b/0", Proto: 6, Src: Side{Sets: []string{"s-a"}}, Dst: Side{NamedPortSet: "n-a"}, Action: ActAccept},
		{ID: "b/end", Action: ActDrop},
	})
	for _, p := range []*polab.Pod{a, c} {
		d.SetEndpoint(p.Iface, "allow-all", "allow-all", BothFamilies)
	}
	d.SetEndpoint(b.Iface, "allow-all", "tw-b", BothFamilies)
	if err := d.Apply(); err != nil {
		t.Fatal(err)
	}

	// The dump against the library, set by set and family by family.
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		tb := &nftables.Table{Name: DefaultTable, Family: fam}
		for _, name := range []string{"s-a", "n-a"} {
			set, err := conn.GetSetByName(tb, name)
			if err != nil {
				t.Fatalf("family %d set %s: %v", fam, name, err)
			}
			els, err := conn.GetSetElements(set)
			if err != nil {
				t.Fatal(err)
			}
			var want, got [][]byte
			for _, e := range els {
				want = append(want, e.Key)
			}
			begins := 0
			err = d.dump.setKeys(fam, DefaultTable, name, func() { begins++; got = got[:0] }, func(k []byte) { got = append(got, bytes.Clone(k)) })
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(want, bytes.Compare)
			slices.SortFunc(got, bytes.Compare)
			if len(want) == 0 || begins != 1 || !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("family %d set %s: dump read %d keys (%d attempts), GetSetElements %d", fam, name, len(got), begins, len(want))
			}
		}
		if err := d.dump.setKeys(fam, DefaultTable, "no-such-set", func() {}, func([]byte) { t.Error("a key of a missing set") }); err != nil {
			t.Fatalf("a missing set: %v", err)
		}
		keys := 0
		allocs := testing.AllocsPerRun(3, func() {
			keys = 0
			if err := d.dump.setKeys(fam, DefaultTable, "s-a", func() {}, func([]byte) { keys++ }); err != nil {
				t.Fatal(err)
			}
		})
		set, err := conn.GetSetByName(&nftables.Table{Name: DefaultTable, Family: fam}, "s-a")
		if err != nil {
			t.Fatal(err)
		}
		lib := testing.AllocsPerRun(3, func() {
			if _, err := conn.GetSetElements(set); err != nil {
				t.Fatal(err)
			}
		})
		if keys < 3001 || allocs > float64(keys)/4 || allocs > lib/10 {
			t.Fatalf("family %d: %.0f allocations to read %d keys (GetSetElements %.0f), want well under one per key", fam, allocs, keys, lib)
		}
		t.Logf("family %d: %.0f allocations to read %d keys, GetSetElements %.0f", fam, allocs, keys, lib)
	}

	for _, v6 := range []bool{false, true} {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, true, "a to b's 8080 (a in s-a)")
		polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, false, "c to b's 8080 (c not in s-a)")
	}
	// Behind felix's back: a out of s-a, c into it, in both families.
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		set, err := conn.GetSetByName(&nftables.Table{Name: DefaultTable, Family: fam}, "s-a")
		if err != nil {
			t.Fatal(err)
		}
		pa, pc := a.IPv4.AsSlice(), c.IPv4.AsSlice()
		if fam == nftables.TableFamilyIPv6 {
			pa, pc = a.IPv6.AsSlice(), c.IPv6.AsSlice()
		}
		if err := conn.SetDeleteElements(set, []nftables.SetElement{{Key: pa}}); err != nil {
			t.Fatal(err)
		}
		if err := conn.SetAddElements(set, []nftables.SetElement{{Key: pc}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, false, "a to b's 8080 with a deleted from the kernel's set")
		polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, true, "c to b's 8080 with c added to the kernel's set")
	}
	w := d.Writes()
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if d.Writes() == w {
		t.Fatal("the resync wrote nothing after the sets drifted")
	}
	for _, v6 := range []bool{false, true} {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, true, "a to b's 8080 after the resync")
		polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, false, "c to b's 8080 after the resync")
	}
	w = d.Writes()
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if d.Writes() != w {
		t.Fatalf("a resync of sets in sync wrote %d times", d.Writes()-w)
	}
}
