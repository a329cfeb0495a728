package cli

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestPoolInUseIsProtected: with an address allocated from a pool, its
// blockSize and cidr cannot change, it cannot be deleted without
// --force, and once forced, ipam check reports the orphaned block and
// exits 1 (0 when clean, 2 when it cannot run).
func TestPoolInUseIsProtected(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	pool := func(spec string) string {
		return "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {" + spec + "}\n"
	}
	node := "---\napiVersion: routed.io/v1\nkind: Node\nmetadata: {name: n1}\nspec: {bgp: {ipv4Address: 10.0.0.1/24}}\n"
	if _, errOut, code := ctl(t, ep, pool("cidr: 10.61.0.0/24, blockSize: 26")+node, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply pool: %s", errOut)
	}
	ds, err := datastore.New(datastore.Config{Endpoints: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ip, err := ipam.New(ds).AutoAssign(context.Background(), ipam.AssignArgs{Node: "n1", HandleID: "h1"})
	if err != nil || len(ip) != 1 {
		t.Fatalf("allocate: %v %v", ip, err)
	}

	for field, spec := range map[string]string{"spec.blockSize": "cidr: 10.61.0.0/24, blockSize: 28", "spec.cidr": "cidr: 10.61.0.0/23, blockSize: 26"} {
		for _, verb := range []string{"apply", "replace"} {
			_, errOut, code := ctl(t, ep, pool(spec), verb, "-f", "-")
			if code == 0 || !strings.Contains(errOut, field) || !strings.Contains(errOut, "create a new pool") || !strings.Contains(errOut, "disabled: true") {
				t.Errorf("%s %s change: exit %d, stderr %q; want an error naming the field and how to migrate", verb, field, code, errOut)
			}
		}
	}
	// Other fields still change.
	if _, errOut, code := ctl(t, ep, pool("cidr: 10.61.0.0/24, blockSize: 26, natOutgoing: true"), "replace", "-f", "-"); code != 0 {
		t.Fatalf("replace natOutgoing: %s", errOut)
	}

	out, _, code := ctl(t, ep, "", "ipam", "check")
	if code != 0 || !strings.Contains(out, "No IPAM problems") {
		t.Errorf("ipam check on a clean datastore: exit %d\n%s", code, out)
	}

	_, errOut, code := ctl(t, ep, "", "delete", "ippool", "p")
	if code == 0 || !strings.Contains(errOut, "still has 1 address(es) allocated in 1 block(s)") || !strings.Contains(errOut, "--force") {
		t.Fatalf("delete of a pool in use: exit %d, stderr %q", code, errOut)
	}
	if out, _, code := ctl(t, ep, "", "get", "ippool", "p"); code != 0 || !strings.Contains(out, "10.61.0.0/24") {
		t.Fatalf("the refused delete removed the pool: %d\n%s", code, out)
	}
	if _, errOut, code := ctl(t, ep, "", "delete", "ippool", "p", "--force"); code != 0 {
		t.Fatalf("delete --force: %s", errOut)
	}
	out, _, code = ctl(t, ep, "", "ipam", "check")
	block := netip.PrefixFrom(ip[0], 26).Masked().String()
	if code != 1 || !strings.Contains(out, "Blocks outside every pool") || !strings.Contains(out, block) || !strings.Contains(out, "Fix: ") {
		t.Errorf("ipam check after a forced delete: exit %d, want 1 naming the block with a Fix: hint\n%s", code, out)
	}
	_, errOut, code = ctl(t, "http://127.0.0.1:1", "", "ipam", "check")
	if code != 2 || !strings.Contains(errOut, "ipam check could not run") {
		t.Errorf("ipam check without etcd: exit %d, want 2; stderr %q", code, errOut)
	}
}
