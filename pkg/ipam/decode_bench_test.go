package ipam

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// benchBlock is a /26 of sim-00007 holding 30 pods (a big cluster's
// average), 3 of them borrowed by sim-00009.
func benchBlock() []byte {
	b := newBlock(netip.MustParsePrefix("10.140.12.64/26"), "sim-00007", 100, time.Unix(1e9, 0))
	for i := range 30 {
		node := "sim-00007"
		if i%10 == 0 {
			node = "sim-00009"
		}
		b.allocate(-1, attribute{Handle: fmt.Sprintf("routed-net.%032x.eth0", i), Namespace: "team-0042",
			Pod: fmt.Sprintf("app-3-7f9c6d5b8-%05d", i), Node: node, Type: TypePod}, time.Unix(1e9, 0))
	}
	return b.encode()
}

// borrowedWhole is DecodeBorrowed's answer as it was computed before
// blockNodes: from the whole decoded block.
func borrowedWhole(value []byte) (map[netip.Addr]string, error) {
	b, err := decodeBlock(value)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]string{}
	owner := b.owner()
	for o := range b.Allocations {
		if h := b.holder(o); h != nil && h.Node != "" && h.Node != owner {
			out[b.addr(o)] = h.Node
		}
	}
	return out, nil
}

// TestDecodeBorrowedAgreesWithDecodeBlock: the feed's lean decode of a
// block gives the same borrowed addresses as the whole decode, and
// refuses exactly the blocks decodeBlock refuses (bad cidr, arrays of
// the wrong length, a missing attribute, an ordinal out of range, a
// field of the wrong type, in an attribute too).
func TestDecodeBorrowedAgreesWithDecodeBlock(t *testing.T) {
	good := string(benchBlock())
	cases := map[string]string{
		"good":                good,
		"no affinity":         strings.Replace(good, `"affinity":"host:sim-00007"`, `"affinity":""`, 1),
		"null attribute text": strings.Replace(good, `"namespace":"team-0042"`, `"namespace":null`, 1),
		"bad cidr":            strings.Replace(good, `10.140.12.64/26`, `10.140.12.64/33`, 1),
		"short seq":           strings.Replace(good, `"allocationSequence":[`, `"allocationSequence":[1,`, 1),
		"missing attribute":   strings.Replace(good, `"allocations":[0`, `"allocations":[99`, 1),
		"unallocated range":   strings.Replace(good, `"unallocated":[`, `"unallocated":[64,`, 1),
		"handle not a string": strings.Replace(good, `"handle":"routed-net.`, `"handle":5,"x":"`, 1),
		"pod not a string":    strings.Replace(good, `"pod":"app`, `"pod":{},"x":"`, 1),
		"node not a string":   strings.Replace(good, `"node":"sim-00009"`, `"node":[]`, 1),
		"bad emptySince":      strings.Replace(good, `"sequenceNumber"`, `"emptySince":"yesterday","sequenceNumber"`, 1),
		"bad sequenceNumber":  strings.Replace(good, `"sequenceNumber":`, `"sequenceNumber":-`, 1),
		"not json":            good[:len(good)/2],
		"null":                "null",
	}
	key := blockPrefix + "10.140.12.64-26"
	for name, v := range cases {
		if name != "good" && v == good {
			t.Fatalf("%s: the edit did not apply", name)
		}
		want, wantErr := borrowedWhole([]byte(v))
		_, got, err := DecodeBorrowed(key, []byte(v), false)
		if (err != nil) != (wantErr != nil) {
			t.Errorf("%s: error %v, the whole decode's %v", name, err, wantErr)
			continue
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: borrowed %v, the whole decode's %v", name, got, want)
		}
	}
	if _, got, _ := DecodeBorrowed(key, []byte(good), false); len(got) != 3 {
		t.Errorf("borrowed %v, want the 3 addresses of sim-00009", got)
	}
	// A value for another cidr than its key's would have its addresses
	// routed by the key's block: refused, as the snapshot refuses it.
	other := blockPrefix + "10.140.12.128-26"
	if _, got, err := DecodeBorrowed(other, []byte(good), false); !errors.Is(err, ErrCorrupt) || got != nil {
		t.Errorf("block 10.140.12.64/26 stored at %s: borrowed %v, error %v; want ErrCorrupt", other, got, err)
	}
}

// BenchmarkDecodeBorrowed: what the node feed's decode of one changed
// block costs, the whole block decoded (as before) against blockNodes.
//
//	go test -run XXX -bench DecodeBorrowed ./pkg/ipam
func BenchmarkDecodeBorrowed(b *testing.B) {
	data := benchBlock()
	key := blockPrefix + "10.140.12.64-26"
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := borrowedWhole(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("nodes", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := DecodeBorrowed(key, data, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
