package cli

import (
	"strings"
	"testing"
)

// TestMigrateCalicoNamesWhatItLeaves: a Calico datastore also holding a
// FelixConfiguration, an IP reservation, a host endpoint, a staged
// policy and an IPv6 block outside every pool is migrated. Network
// policy, tiers, profiles, network sets, the host endpoint, the staged
// policy, the reservation and the FelixConfiguration (its unused field
// warned) are carried; a policy allowing only some HTTP requests is
// carried narrowed (the Allow dropped) and listed so; what cannot be
// carried is printed, each with the reason, instead of being passed
// over in silence: a policy whose tier exists nowhere (a policy loss:
// the run is refused until --accept-policy-loss), a block outside every
// pool.
func TestMigrateCalicoNamesWhatItLeaves(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	const res = "/calico/resources/v3/projectcalico.org/"
	putKeys(t, ep, map[string]string{
		res + "ippools/default-ipv4-ippool":                         `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":"10.246.0.0/16","ipipMode":"Always","blockSize":26,"nodeSelector":"all()"}}`,
		res + "tiers/default":                                       `{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"order":1000000}}`,
		res + "tiers/security":                                      `{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"security"},"spec":{"order":100,"defaultAction":"Pass"}}`,
		res + "globalnetworkpolicies/default.deny-egress":           `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.deny-egress"},"spec":{"tier":"default","order":100,"selector":"all()","types":["Egress"]}}`,
		res + "globalnetworkpolicies/security.block":                `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"security.block"},"spec":{"tier":"security","order":1,"egress":[{"action":"Deny","destination":{"selector":"blocked == 'true'"}},{"action":"Pass"}],"types":["Egress"]}}`,
		res + "globalnetworkpolicies/lost.x":                        `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"lost.x"},"spec":{"tier":"lost","selector":"all()"}}`,
		res + "networkpolicies/shop/default.allow-web":              `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.allow-web","namespace":"shop"},"spec":{"tier":"default","selector":"app == 'web'","ingress":[{"action":"Allow","protocol":"TCP","destination":{"ports":[80]}}],"types":["Ingress"]}}`,
		res + "networkpolicies/shop/default.l7":                     `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.l7","namespace":"shop"},"spec":{"tier":"default","ingress":[{"action":"Allow","http":{"methods":["GET"]}}]}}`,
		res + "profiles/kns.shop":                                   `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"kns.shop"},"spec":{"ingress":[{"action":"Allow"}],"egress":[{"action":"Allow"}],"labelsToApply":{"pcns.projectcalico.org/name":"shop"}}}`,
		res + "globalnetworksets/blocked":                           `{"kind":"GlobalNetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"blocked","labels":{"blocked":"true"}},"spec":{"nets":["198.51.100.0/24"]}}`,
		res + "networksets/shop/partners":                           `{"kind":"NetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"partners","namespace":"shop"},"spec":{"nets":["192.0.2.0/24"]}}`,
		res + "hostendpoints/node-a-eth0":                           `{"kind":"HostEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-a-eth0"},"spec":{"node":"node-a","interfaceName":"eth0"}}`,
		res + "stagednetworkpolicies/shop/default.try":              `{"kind":"StagedNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.try","namespace":"shop"},"spec":{"tier":"default"}}`,
		res + "felixconfigurations/default":                         `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"bpfEnabled":false,"logSeverityScreen":"Info","reportingInterval":"0s"}}`,
		res + "ipreservations/gateways":                             `{"kind":"IPReservation","apiVersion":"projectcalico.org/v3","metadata":{"name":"gateways"},"spec":{"reservedCIDRs":["10.246.0.1/32"]}}`,
		"/calico/ipam/v2/assignment/ipv6/block/fd00:10:244:1::-122": `{"cidr":"fd00:10:244:1::/122","affinity":"host:node-a","allocations":[],"unallocated":[],"attributes":[],"deleted":false}`,
	})
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code == 0 || !strings.Contains(out, `POLICY LOSS: GlobalNetworkPolicy lost.x cannot be carried (its tier "lost" is in neither datastore)`) ||
		!strings.Contains(errOut, "--accept-policy-loss") {
		t.Fatalf("migrate with a policy lost: code %d, want refused naming it\n%s%s", code, out, errOut)
	}
	if out, _, code := ctl(t, ep, "", "get", "ippool", "default-ipv4-ippool"); code == 0 {
		t.Fatalf("the refused run wrote the pool:\n%s", out)
	}
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep, "--accept-policy-loss")
	if code != 0 {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"Narrowed: NetworkPolicy shop.default.l7: spec.ingress[0] (Allow with an HTTP match) dropped",
		`POLICY LOSS: GlobalNetworkPolicy lost.x cannot be carried (its tier "lost" is in neither datastore)`,
		"Not carried over: block fd00:10:244:1::/122 (0 addresses in use): not inside a carried IP pool",
		"HostEndpoint         node-a-eth0             create",
		"StagedNetworkPolicy  shop.default.try        create",
		"IPReservation        gateways                create",
		"FelixConfiguration   default                 create",
		"NetworkPolicy        shop.default.l7         create",
		// pool, reservation, FelixConfiguration, host endpoint, 2 tiers,
		// profile, 2 sets, 2 global and 2 namespaced policies, 1 staged.
		"Migrated: 14 to create, 0 to update, 0 unchanged, 0 conflicts, 2 not carried over (1 enforcing policy, loss accepted), 1 narrowed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "WARNING: policy lost: GlobalNetworkPolicy lost.x") {
		t.Errorf("the accepted loss is not warned about:\n%s", errOut)
	}
	out, _, _ = ctl(t, ep, "", "get", "networkpolicy", "shop/default.allow-web", "-o", "yaml")
	if !strings.Contains(out, "namespace: shop") || !strings.Contains(out, "- 80") {
		t.Errorf("migrated policy:\n%s", out)
	}
	out, _, _ = ctl(t, ep, "", "get", "hostendpoint", "node-a-eth0", "-o", "yaml")
	if !strings.Contains(out, "interfaceName: eth0") || !strings.Contains(out, "node: node-a") {
		t.Errorf("migrated host endpoint:\n%s", out)
	}
	out, _, _ = ctl(t, ep, "", "get", "ipreservation", "gateways", "-o", "yaml")
	if !strings.Contains(out, "10.246.0.1/32") {
		t.Errorf("migrated reservation:\n%s", out)
	}
	out, _, _ = ctl(t, ep, "", "get", "tiers")
	for _, want := range []string{"security", "kube-admin", "kube-baseline"} {
		if !strings.Contains(out, want) {
			t.Errorf("tiers lack %s:\n%s", want, out)
		}
	}
	// A second run finds everything in place.
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep, "--accept-policy-loss")
	if code != 0 || !strings.Contains(out, "0 to create, 0 to update, 14 unchanged, 0 conflicts") {
		t.Errorf("second migrate: code %d\n%s%s", code, out, errOut)
	}
}
