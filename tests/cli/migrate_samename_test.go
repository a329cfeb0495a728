package cli

import (
	"strings"
	"testing"
)

// TestMigrateCalicoRefusesTwoOfOneName: two Calico policies that carry
// one name into routed (deny-all stored as default.deny-all with its
// given name in projectcalico.org/metadata, and an older one stored as
// deny-all) are both marked conflict and nothing is written, where the
// write used to stop half way at the second.
func TestMigrateCalicoRefusesTwoOfOneName(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	putKeys(t, ep, calicoDatastore)
	res := "/calico/resources/v3/projectcalico.org/"
	putKeys(t, ep, map[string]string{
		res + "globalnetworkpolicies/default.deny-all": `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.deny-all","annotations":{"projectcalico.org/metadata":"{\"name\":\"deny-all\"}"}},"spec":{"tier":"default","order":100,"selector":"all()","types":["Ingress"]}}`,
		res + "globalnetworkpolicies/deny-all":         `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"deny-all"},"spec":{"tier":"default","order":200,"selector":"all()","types":["Egress"]}}`,
	})
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code == 0 || !strings.Contains(out+errOut, "nothing was written") || strings.Count(out, "2 resources in Calico's datastore carry this name") != 2 {
		t.Fatalf("two policies of one name: code %d\n%s%s", code, out, errOut)
	}
	if out, _, code := ctl(t, ep, "", "get", "ippools"); code != 0 || strings.Contains(out, "10.244.") {
		t.Errorf("something was written (pools):\n%s", out)
	}
	t.Logf("%s%s", out, errOut)
}
