package policy_test

import (
	"encoding/json"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/migrate"
)

// TestMigratedHTTPPoliciesDenyAtLeastAsMuch: Calico policies with HTTP
// matches, converted as `routedctl migrate calico` carries them
// (migrate.ConvertCalico: routed runs no application-layer proxy, so
// they are narrowed), deny under real traffic at least what Calico
// denied, where leaving them out would have allowed it:
//   - b's only ingress rule allowed GET requests: dropped, b keeps the
//     policy's default deny (a -> b refused; without the policy, open);
//   - c's Deny of GET requests to 9090 keeps its port match: a -> c:9090
//     refused, c's other ports still allowed by the next rule;
//   - d's only egress rule allowed GET requests and the policy named no
//     types: Calico inferred Egress, which is pinned, so d's egress is
//     denied and its ingress stays open (inferred again from the emptied
//     rules, the policy would have turned Ingress-only: the reverse).
func TestMigratedHTTPPoliciesDenyAtLeastAsMuch(t *testing.T) {
	l := newLab(t)
	for _, c := range []struct {
		kind api.Kind
		doc  string
	}{
		{api.KindNetworkPolicy, `{"metadata":{"name":"b-gets","namespace":"prod"},"spec":{"selector":"app == 'b'",
		 "ingress":[{"action":"Allow","protocol":"TCP","http":{"methods":["GET"]}}]}}`},
		{api.KindGlobalNetworkPolicy, `{"metadata":{"name":"c-no-gets"},"spec":{"selector":"app == 'c'",
		 "ingress":[{"action":"Deny","protocol":"TCP","destination":{"ports":[9090]},"http":{"methods":["GET"]}},{"action":"Allow"}]}}`},
		{api.KindNetworkPolicy, `{"metadata":{"name":"d-out","namespace":"prod"},"spec":{"selector":"app == 'd'",
		 "egress":[{"action":"Allow","protocol":"TCP","http":{"methods":["GET"]}}]}}`},
	} {
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.doc), &obj); err != nil {
			t.Fatal(err)
		}
		r, changes, err := migrate.ConvertCalico(c.kind, obj)
		if err != nil || len(changes) != 1 {
			t.Fatalf("%s: %v, changes %q", c.doc, err, changes)
		}
		p := r.(api.Policy)
		api.SetDefaults(p)
		if err := l.m.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	l.apply()
	l.expect("narrowed from Calico's HTTP matches",
		drop("a", "b", "tcp", 8080),
		drop("a", "c", "tcp", 9090), pass("a", "c", "tcp", 8080),
		drop("d", "a", "tcp", 8080), pass("a", "d", "tcp", 8080))
}
