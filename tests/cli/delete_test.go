package cli

import (
	"strings"
	"testing"
)

// TestDeleteByKindAndName: `routedctl delete -f` needs only kind and
// metadata.name, as calicoctl does. Calico-style delete files for
// several kinds (no spec at all) were refused by spec validation.
func TestDeleteByKindAndName(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	full := `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.250.0.0/16}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 192.0.2.1, asNumber: 65001}
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: worker-1}
spec: {bgp: {ipv4Address: 192.0.2.10/24}}
---
apiVersion: routed.io/v1
kind: BGPFilter
metadata: {name: only-pods}
spec: {importV4: [{action: Accept, matchOperator: In, cidr: 10.250.0.0/16}]}
`
	if out, errOut, code := ctl(t, ep, full, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: code %d\n%s%s", code, out, errOut)
	}
	names := `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
---
apiVersion: projectcalico.org/v3
kind: NodeList
items:
- metadata: {name: worker-1}
---
apiVersion: routed.io/v1
kind: BGPFilter
metadata: {name: only-pods}
`
	out, errOut, code := ctl(t, ep, names, "delete", "-f", "-")
	if code != 0 || !strings.Contains(out, "Successfully deleted 5 resource(s)") {
		t.Fatalf("delete -f with kind and name only: code %d\n%s%s", code, out, errOut)
	}
	for _, kn := range [][2]string{{"ippool", "pool-a"}, {"bgppeer", "tor"}, {"bgpconfiguration", "default"}, {"node", "worker-1"}, {"bgpfilter", "only-pods"}} {
		_, errOut, code := ctl(t, ep, "", "get", kn[0], kn[1])
		if code == 0 || !strings.Contains(errOut, "not found") {
			t.Errorf("get %s %s after delete: code %d, %q", kn[0], kn[1], code, errOut)
		}
	}
	for _, bad := range []struct{ in, mention string }{
		{"apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {}\n", "metadata.name is required"},
		{"apiVersion: projectcalico.org/v3\nkind: Frobnicator\nmetadata: {name: x}\n", `"Frobnicator"`},
		{"apiVersion: v1\nkind: IPPool\nmetadata: {name: x}\n", `apiVersion "v1" not supported`},
	} {
		_, errOut, code := ctl(t, ep, bad.in, "delete", "-f", "-")
		if code == 0 || !strings.Contains(errOut, bad.mention) {
			t.Errorf("delete -f of %q: code %d, want an error naming %q, got %q", bad.in, code, bad.mention, errOut)
		}
	}
}
