package cli

import (
	"strings"
	"testing"
)

// TestDatastoreCommands runs `routedctl datastore` and `ipam check` as an
// operator does around a migration and a re-initialisation.
func TestDatastoreCommands(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)

	out, errOut, code := ctl(t, ep, "", "datastore", "show")
	if code == 0 || !strings.Contains(out, "No cluster identity") {
		t.Fatalf("show on an empty datastore: code %d, out %q, err %q", code, out, errOut)
	}
	// The first write gives the datastore its identity.
	if _, errOut, code := ctl(t, ep, calicoPool, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	out, _, code = ctl(t, ep, "", "datastore", "show")
	if code != 0 || !strings.Contains(out, "Datastore ready: true") || strings.Contains(out, "Adopted until") {
		t.Fatalf("show after the first write: code %d:\n%s", code, out)
	}
	guid := field(out, "Cluster GUID:")

	if out, errOut, code := ctl(t, ep, "", "datastore", "set-ready", "false"); code != 0 || !strings.Contains(out, "Datastore ready: false") {
		t.Fatalf("set-ready false: code %d, %q %q", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "ipam", "check")
	if code != 1 || !strings.Contains(out, "set-ready true") {
		t.Fatalf("ipam check on a datastore marked not ready: want exit 1 naming set-ready; code %d, out %q, err %q", code, out, errOut)
	}
	if _, errOut, code := ctl(t, ep, "", "datastore", "set-ready", "maybe"); code == 0 || !strings.Contains(errOut, "true or false") {
		t.Fatalf("set-ready maybe: code %d, %q", code, errOut)
	}
	if _, errOut, code := ctl(t, ep, "", "datastore", "set-ready", "true"); code != 0 {
		t.Fatalf("set-ready true: %s", errOut)
	}
	if out, errOut, code := ctl(t, ep, "", "ipam", "check"); code != 0 {
		t.Fatalf("ipam check on a ready datastore: code %d, out %q, err %q", code, out, errOut)
	}

	if _, errOut, code := ctl(t, ep, "", "datastore", "reinit", "--adopt-window", "0s"); code == 0 || !strings.Contains(errOut, "adopt-window") {
		t.Fatalf("reinit with a zero window: code %d, %q", code, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "datastore", "reinit", "--adopt-window", "1h")
	if code != 0 || !strings.Contains(out, "Adopted until") || field(out, "Cluster GUID:") == guid {
		t.Fatalf("reinit: code %d, out %q, err %q", code, out, errOut)
	}
}

// field returns the value after label in routedctl's "Label:  value" output.
func field(out, label string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, label); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
