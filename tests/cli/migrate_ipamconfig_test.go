package cli

import (
	"strings"
	"testing"
)

// TestMigrateCalicoIPAMConfig: Calico's IPAM configuration
// (/calico/ipam/v2/config, libcalico-go model.IPAMConfig's JSON) is
// carried over. Left behind, a cluster with strictAffinity (no borrowing
// from other nodes' blocks, as Windows nodes need) would borrow under
// routed.
func TestMigrateCalicoIPAMConfig(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	putKeys(t, ep, map[string]string{"/calico/ipam/v2/config": `{"strict_affinity":true,"auto_allocate_blocks":true,"maxBlocksPerHost":4}`})
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "IPAMConfiguration") || !strings.Contains(out, "Migrated: 1 to create") {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "get", "ipamconfiguration", "default", "-o", "yaml")
	for _, want := range []string{"strictAffinity: true", "maxBlocksPerHost: 4", "autoAllocateBlocks: true"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("IPAM configuration lacks %q: code %d\n%s%s", want, code, out, errOut)
		}
	}
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "Migrated: 0 to create, 0 to update, 1 unchanged, 0 conflicts") {
		t.Fatalf("second run: code %d\n%s%s", code, out, errOut)
	}
}
