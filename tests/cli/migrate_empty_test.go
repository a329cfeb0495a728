package cli

import (
	"strings"
	"testing"
)

// TestMigrateCalicoRefusesEmptySource: pointed at an etcd without
// Calico's keys (the wrong endpoint, or a Calico cluster on the
// Kubernetes datastore), the migration says so and fails instead of
// reporting nothing to do.
func TestMigrateCalicoRefusesEmptySource(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep, "--dry-run")
	if code != 1 || !strings.Contains(errOut, "no Calico datastore") || !strings.Contains(errOut, "/calico/") {
		t.Fatalf("empty source: code %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(errOut))
}
