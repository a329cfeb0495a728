package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	routedctl "github.com/routed-net/routed/routed/ctl"
	"github.com/routed-net/routed/tests/testbin"
)

// spoofModel: pods client (10.67.0.1), web (.2) and other (.3), each
// with an IPv6 address too, in namespace shop, whose profile allows
// everything; web admits TCP only from other.
func spoofModel() string {
	y := "apiVersion: routed.io/v1\nkind: Profile\nmetadata: {name: kns.shop}\nspec: {ingress: [{action: Allow}], egress: [{action: Allow}]}\n"
	for i, pod := range []string{"client", "web", "other"} {
		y += fmt.Sprintf(`---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: sp--node-k8s-shop-%[1]s-eth0, labels: {app: %[1]s}}
spec: {node: sp-node, orchestrator: k8s, namespace: shop, pod: %[1]s, containerID: c%[2]d, interfaceName: calisp%[2]d, ipNetworks: [10.67.0.%[2]d/32, "fd00:67::%[2]d/128"], profiles: [kns.shop]}
`, pod, i+1)
	}
	return y + `---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web-from-other, namespace: shop}
spec: {selector: app == 'web', types: [Ingress], ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'other'}}]}
`
}

// TestExplainSpoofedSourceThroughRoutedctl: policy explain --from
// shop/client with other's address as the source answers "dropped:
// spoofed source" at client's egress (spoofed-src/egress) and never
// reaches web's ingress, although web's policy admits other (the same
// flow from other itself is allowed), IPv4 and IPv6; from client's own
// address web's policy decides (denied); a link-local source passes
// the check and client's egress allows it; --from with a pod as SRC,
// or naming no pod, is refused.
func TestExplainSpoofedSourceThroughRoutedctl(t *testing.T) {
	t.Parallel()
	testbin.Path(t, "routedctl")
	ep := startEtcd(t)
	if out, errOut, code := ctl(t, ep, spoofModel(), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	explainJSON := func(args ...string) routedctl.ExplainResult {
		t.Helper()
		out, errOut, code := ctl(t, ep, "", append([]string{"policy", "explain", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("explain %v: exit %d\n%s%s", args, code, out, errOut)
		}
		var r routedctl.ExplainResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("explain %v -o json: %v\n%s", args, err, out)
		}
		return r
	}
	if r := explainJSON("shop/other", "shop/web", "tcp/8080"); !r.Allowed {
		t.Fatalf("other's own flow to web should be allowed: %+v", r)
	}
	for _, src := range []string{"10.67.0.3", "fd00:67::3"} {
		r := explainJSON(src, "shop/web", "tcp/8080", "--from", "shop/client")
		if r.Allowed || r.From != "shop/client" || r.Egress.Rule.Kind != policy.KindSpoofedSource || r.Egress.Rule.ID != "spoofed-src/egress" ||
			r.Egress.Endpoint != "sp--node-k8s-shop-client-eth0" || r.Egress.Node != "sp-node" || r.Ingress.Rule.Kind != policy.KindNotReached {
			t.Errorf("client sending from %s: %+v", src, r)
		}
		out, errOut, code := ctl(t, ep, "", "policy", "explain", src, "shop/web", "tcp/8080", "--from", "shop/client")
		if code != 0 || !strings.Contains(out, "verdict: dropped: spoofed source") || !strings.Contains(out, "ingress: not reached") {
			t.Errorf("client sending from %s, as text: exit %d\n%s%s", src, code, out, errOut)
		}
		t.Logf("explain %s shop/web tcp/8080 --from shop/client:\n%s", src, out)
	}
	r := explainJSON("10.67.0.1", "shop/web", "tcp/8080", "--from", "sp--node-k8s-shop-client-eth0")
	if r.Allowed || !r.Egress.Allowed || r.Egress.Rule.Kind != policy.KindProfileRule || r.Ingress.Rule.Kind != policy.KindTierEnd {
		t.Errorf("client from its own address: egress %+v, ingress %+v", r.Egress.Rule, r.Ingress.Rule)
	}
	r = explainJSON("fe80::5", "fd00:67::2", "tcp/8080", "--from", "shop/client")
	if r.Egress.Rule.Kind == policy.KindSpoofedSource || !r.Egress.Allowed || r.Egress.Endpoint != "sp--node-k8s-shop-client-eth0" {
		t.Errorf("client from a link-local address: egress %+v", r.Egress)
	}
	for _, bad := range [][]string{
		{"shop/other", "shop/web", "tcp/8080", "--from", "shop/client"},
		{"10.67.0.3", "shop/web", "tcp/8080", "--from", "shop/nobody"},
	} {
		out, errOut, code := ctl(t, ep, "", append([]string{"policy", "explain"}, bad...)...)
		if code == 0 || !strings.Contains(errOut, "--from") && !strings.Contains(errOut, "SRC must be an address") {
			t.Errorf("explain %v: exit %d, want refused naming --from or SRC\n%s%s", bad, code, out, errOut)
		}
	}
}
