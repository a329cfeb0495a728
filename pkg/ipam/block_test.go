package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestBlockFIFOAndSequence(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBlock(pfx("10.0.0.0/30"), "n1", 100, now)
	if b.free() != 4 || b.EmptySince == nil {
		t.Fatalf("new block: free %d emptySince %v", b.free(), b.EmptySince)
	}
	a := attribute{Handle: "h1", Node: "n1", Type: TypePod}
	var got []int
	for range 4 {
		o, ok := b.allocate(-1, a, now)
		if !ok {
			t.Fatal("allocate failed with free addresses")
		}
		got = append(got, o)
	}
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("allocation order %v, want head of FIFO first", got)
	}
	if _, ok := b.allocate(-1, a, now); ok {
		t.Fatal("allocated from a full block")
	}
	if len(b.Attributes) != 1 {
		t.Fatalf("identical attributes not shared: %d entries", len(b.Attributes))
	}
	if b.Seq[3] != 104 || b.SequenceNumber != 104 {
		t.Fatalf("seq[3]=%d block seq=%d, want 104 (base 100, four writes)", b.Seq[3], b.SequenceNumber)
	}
	b.release(2, now)
	b.release(0, now)
	if !slices.Equal(b.Unallocated, []int{2, 0}) {
		t.Fatalf("free list %v, want freed addresses appended in order", b.Unallocated)
	}
	o, _ := b.allocate(-1, attribute{Handle: "h2", Node: "n2", Type: TypePod}, now)
	if o != 2 || len(b.Attributes) != 2 {
		t.Fatalf("got ordinal %d with %d attributes, want 2 and 2", o, len(b.Attributes))
	}
	if probs := verifyBlock(b); len(probs) > 0 {
		t.Fatalf("invariants: %v", probs)
	}
	for _, o := range []int{1, 2, 3} {
		b.release(o, now)
	}
	if len(b.Attributes) != 0 || b.EmptySince == nil || b.inUse() != 0 {
		t.Fatalf("empty block keeps %d attributes, emptySince %v", len(b.Attributes), b.EmptySince)
	}
	if probs := verifyBlock(b); len(probs) > 0 {
		t.Fatalf("invariants: %v", probs)
	}
}

func TestBlockSpecificOrdinalAndAttributeCompaction(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBlock(pfx("10.0.0.0/29"), "n1", 0, now)
	for i, h := range []string{"a", "b", "c"} {
		if _, ok := b.allocate(i, attribute{Handle: h, Node: "n1", Type: TypePod}, now); !ok {
			t.Fatal("allocate")
		}
	}
	if _, ok := b.allocate(1, attribute{Handle: "x"}, now); ok {
		t.Fatal("allocated a taken ordinal")
	}
	o, ok := b.ordinal(netip.MustParseAddr("10.0.0.5"))
	if !ok || o != 5 || b.addr(5) != netip.MustParseAddr("10.0.0.5") {
		t.Fatalf("ordinal mapping wrong: %d %v", o, ok)
	}
	if _, ok := b.ordinal(netip.MustParseAddr("10.0.0.8")); ok {
		t.Fatal("address outside block mapped to an ordinal")
	}
	b.release(0, now) // drops attribute "a": "b" and "c" must be renumbered
	if b.holder(1).Handle != "b" || b.holder(2).Handle != "c" || len(b.Attributes) != 2 {
		t.Fatalf("attributes not renumbered: %+v", b.Attributes)
	}
	if probs := verifyBlock(b); len(probs) > 0 {
		t.Fatalf("invariants: %v", probs)
	}
}

func TestBlockEncodeDecode(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBlock(pfx("10.1.2.0/28"), "n1", 7, now)
	b.allocate(-1, attribute{Handle: "h", Node: "n1", Type: TypeTunnel}, now)
	got, err := decodeBlock(b.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.prefix != b.prefix || got.holder(0).Type != TypeTunnel || got.Seq[0] != 8 {
		t.Fatalf("round trip lost data: %+v", got)
	}
	if _, err := decodeBlock([]byte(`{"cidr":"10.0.0.0/30","allocations":[null]}`)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short arrays: err %v, want ErrCorrupt", err)
	}
	if _, err := decodeBlock([]byte(`{`)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad json: err %v, want ErrCorrupt", err)
	}
}

func TestKeys(t *testing.T) {
	p := pfx("10.244.0.0/26")
	if k := blockKey(p); k != "/routed/ipamdata/v1/blocks/10.244.0.0-26" {
		t.Fatalf("block key %q", k)
	}
	if k := summaryKeyOf(blockKey(p)); k != "/routed/v1/ipam/blocks/10.244.0.0-26" {
		t.Fatalf("summary key %q", k)
	}
	for _, k := range []string{blockKey(p), summaryKeyOf(blockKey(p))} {
		if got, err := parseBlockKey(k); err != nil || got != p {
			t.Fatalf("parse block key %s: %v %v", k, got, err)
		}
	}
	node, got, err := parseAffinityKey(affinityKey("node-1.example", p))
	if err != nil || node != "node-1.example" || got != p {
		t.Fatalf("parse affinity key: %q %v %v", node, got, err)
	}
	if h := PodHandle(DefaultNetwork, "abc"); h != "k8s-pod-network.abc" {
		t.Fatalf("pod handle %q", h)
	}
	if h := TunnelHandle("n1"); h != "ipip-tunnel-addr-n1" {
		t.Fatalf("tunnel handle %q", h)
	}
	if err := checkName("handle", "a/b"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("slash in handle accepted: %v", err)
	}
}
