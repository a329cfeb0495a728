package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestBlockSizeChangeIsRefused reproduces the duplicate-IP fault: a pool
// in use gets a new blockSize. Through the datastore the change is
// refused; written behind its back (an older routed, a hand edit), IPAM
// claims /28s inside n1's /26, two pods hold one address, and Check
// names the overlap and the address two endpoints share.
func TestBlockSizeChangeIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.pool("p", "10.9.0.0/26", 26)
	c := New(e.ds)
	e.node("n1", nil)
	e.node("n2", nil)
	// n1 fills its /26: every /28 a new blockSize carves overlaps it.
	ips, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n1", HandleID: "n1-pods", Num: 64})
	if err != nil || len(ips) != 64 {
		t.Fatalf("AutoAssign 64: %d, %v", len(ips), err)
	}
	e.wep("n1", "pods", "n1-pods", ips...)
	n1 := ips

	p.Spec.BlockSize = 28
	_, err = e.ds.Apply(context.Background(), p)
	var ve *api.ValidationError
	if !errors.Is(err, api.ErrInvalid) || !errors.As(err, &ve) || ve.Fields[0].Field != "spec.blockSize" ||
		!strings.Contains(err.Error(), "create a new pool") {
		t.Fatalf("blockSize change: %v, want a spec.blockSize error with the migration", err)
	}
	p.Spec.BlockSize, p.Spec.CIDR = 26, "10.9.0.0/25"
	if _, err := e.ds.Apply(context.Background(), p); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "spec.cidr") {
		t.Fatalf("cidr change: %v, want a spec.cidr error", err)
	}

	// The fault, behind the datastore's back.
	p.Spec.CIDR, p.Spec.BlockSize = "10.9.0.0/26", 28
	raw, _ := json.Marshal(p)
	if _, err := e.ds.Etcd().Put(context.Background(), datastore.Key(api.KindIPPool, "p"), string(raw)); err != nil {
		t.Fatal(err)
	}
	c2 := New(e.ds) // a fresh client (another node's CNI ADD)
	var dup netip.Addr
	for i := 0; i < 1 && !dup.IsValid(); i++ {
		ip := assign(t, c2, "n2", "n2-pod"+string(rune('a'+i)))
		for _, a := range n1 {
			if a == ip {
				dup = ip
				e.wep("n2", "dup", "n2-pod"+string(rune('a'+i)), ip)
			}
		}
	}
	if !dup.IsValid() {
		t.Fatal("could not reproduce a duplicate address")
	}
	rep, err := c.Check(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Overlaps) == 0 || rep.Overlaps[0].A.CIDR != netip.MustParsePrefix("10.9.0.0/26") {
		t.Errorf("overlaps %+v, want the /28 inside n1's /26", rep.Overlaps)
	}
	found := false
	for _, o := range rep.Overlaps {
		for _, a := range o.Shared {
			found = found || a == dup
		}
	}
	if !found {
		t.Errorf("overlaps %+v do not name the duplicate %s", rep.Overlaps, dup)
	}
	if len(rep.SharedAddresses) != 1 || rep.SharedAddresses[0].IP != dup || len(rep.SharedAddresses[0].Endpoints) != 2 {
		t.Errorf("shared addresses %+v, want %s named by two endpoints", rep.SharedAddresses, dup)
	}
	// Each endpoint's address is allocated to it, in one of the two
	// blocks: the fault is the double allocation, reported above.
	if len(rep.EndpointMismatches) != 0 {
		t.Errorf("endpoint mismatches %+v, want none", rep.EndpointMismatches)
	}
}

// TestCheckFindsBlocksOutsidePools: a pool deleted with blocks left.
func TestCheckFindsBlocksOutsidePools(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "gone", "10.8.0.0/24", 26)
	e.node("n1", nil)
	ip := assign(t, c, "n1", "h1")
	e.wep("n1", "pod", "h1", ip)
	if err := e.ds.Delete(context.Background(), api.KindIPPool, "gone", ""); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Check(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.OutsidePools) != 1 || rep.OutsidePools[0].CIDR != netip.PrefixFrom(ip, 26).Masked() || rep.Problems() == 0 {
		t.Errorf("outside pools %+v (problems %d), want the block of %s", rep.OutsidePools, rep.Problems(), ip)
	}
}

// TestCheckFindsUnallocatedEndpoint: an endpoint naming an address IPAM
// never gave it.
func TestCheckFindsUnallocatedEndpoint(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.7.0.0/24", 26)
	e.node("n1", nil)
	ip := assign(t, c, "n1", "h1")
	e.wep("n1", "good", "h1", ip)
	e.wep("n1", "bad", "h2", ip.Next())
	rep, err := c.Check(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.EndpointMismatches) != 1 || rep.EndpointMismatches[0].IP != ip.Next() || !strings.Contains(rep.EndpointMismatches[0].Reason, "not allocated") {
		t.Errorf("mismatches %+v, want %s not allocated", rep.EndpointMismatches, ip.Next())
	}
}
