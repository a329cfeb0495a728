package nftdp_test

import (
	"testing"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/pkg/kernel/policytable"
)

// TestProgrammed: what the CNI plugin asks before ADD returns
// (pkg/kernel/policytable, against the tables this package writes). No tables
// yet (felix has not run): not programmed. Tables without the interface:
// not programmed. The interface in both dispatch maps: programmed; and
// not again once it is removed.
func TestProgrammed(t *testing.T) {
	node := polab.NewNode(t)
	node.AddPod(t, "cali-p1", "10.66.0.1", "")
	check := func(want bool, when string) {
		t.Helper()
		got, err := policytable.Programmed(node.Fd, "", "cali-p1", false, false)
		if err != nil || got != want {
			t.Fatalf("%s: Programmed = %v, %v; want %v", when, got, err, want)
		}
	}
	check(false, "before any table exists")
	d := newDP(t, node)
	apply(t, d)
	check(false, "tables without the interface")
	allowAll(d, "cali-p1")
	apply(t, d)
	check(true, "after the interface was programmed")
	d.DeleteEndpoint("cali-p1")
	apply(t, d)
	check(false, "after the interface was removed")
}
