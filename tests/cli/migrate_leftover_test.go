package cli

import (
	"strings"
	"testing"
)

// TestMigrateCalicoNamesWhatItLeaves: a Calico datastore also holding
// network policy, a FelixConfiguration, an IP reservation and an IPv6
// block outside every pool is migrated; what routed has no counterpart for is printed as
// not carried over, each with what the operator loses (policy is no
// longer enforced), instead of being passed over in silence.
func TestMigrateCalicoNamesWhatItLeaves(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	putKeys(t, ep, map[string]string{
		"/calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool":               `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":"10.246.0.0/16","ipipMode":"Always","blockSize":26,"nodeSelector":"all()"}}`,
		"/calico/resources/v3/projectcalico.org/globalnetworkpolicies/default.deny-egress": `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.deny-egress"},"spec":{"tier":"default","order":100,"selector":"all()","types":["Egress"]}}`,
		"/calico/resources/v3/projectcalico.org/networkpolicies/shop/default.allow-web":    `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.allow-web","namespace":"shop"},"spec":{"tier":"default","selector":"app == 'web'","ingress":[{"action":"Allow","protocol":"TCP","destination":{"ports":[80]}}],"types":["Ingress"]}}`,
		"/calico/resources/v3/projectcalico.org/felixconfigurations/default":               `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"bpfEnabled":false,"logSeverityScreen":"Info","reportingInterval":"0s"}}`,
		"/calico/resources/v3/projectcalico.org/ipreservations/gateways":                   `{"kind":"IPReservation","apiVersion":"projectcalico.org/v3","metadata":{"name":"gateways"},"spec":{"reservedCIDRs":["10.246.0.1/32"]}}`,
		"/calico/ipam/v2/assignment/ipv6/block/fd00:10:244:1::-122":                        `{"cidr":"fd00:10:244:1::/122","affinity":"host:node-a","allocations":[],"unallocated":[],"attributes":[],"deleted":false}`,
	})
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"Not carried over: 1 globalnetworkpolicies (default.deny-egress): routed enforces no Calico network policy",
		"Not carried over: 1 networkpolicies (shop/default.allow-web): routed enforces no Calico network policy",
		"Not carried over: 1 felixconfigurations (default):",
		"Not carried over: 1 ipreservations (gateways): routed has no IP reservations",
		"Not carried over: block fd00:10:244:1::/122 (0 addresses in use): not inside a carried IP pool",
		"Migrated: 1 to create, 0 to update, 0 unchanged, 0 conflicts, 5 not carried over",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
