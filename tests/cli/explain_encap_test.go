package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	routedctl "github.com/routed-net/routed/routed/ctl"
	"github.com/routed-net/routed/tests/testbin"
)

// TestExplainWorkloadEncapThroughRoutedctl: with FelixConfiguration
// default's vxlanPort 8472, policy explain answers UDP from a pod to
// 8472 and to 4789 "dropped: encapsulated" at its egress
// (wl-encap/egress), never reaching the destination's ingress, although
// the profiles allow everything; UDP to 8473 is allowed.
func TestExplainWorkloadEncapThroughRoutedctl(t *testing.T) {
	t.Parallel()
	testbin.Path(t, "routedctl")
	ep := startEtcd(t)
	model := spoofModel() + "---\napiVersion: routed.io/v1\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {vxlanPort: 8472}\n"
	if out, errOut, code := ctl(t, ep, model, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	explain := func(proto string) routedctl.ExplainResult {
		t.Helper()
		out, errOut, code := ctl(t, ep, "", "policy", "explain", "-o", "json", "shop/client", "shop/other", proto)
		if code != 0 {
			t.Fatalf("explain %s: exit %d\n%s%s", proto, code, out, errOut)
		}
		var r routedctl.ExplainResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("explain %s -o json: %v\n%s", proto, err, out)
		}
		return r
	}
	for _, proto := range []string{"udp/8472", "udp/4789"} {
		r := explain(proto)
		if r.Allowed || r.Egress.Rule.Kind != policy.KindWorkloadEncap || r.Egress.Rule.ID != "wl-encap/egress" ||
			r.Egress.Endpoint != "sp--node-k8s-shop-client-eth0" || r.Ingress.Rule.Kind != policy.KindNotReached {
			t.Errorf("%s: %+v", proto, r)
		}
	}
	if r := explain("udp/8473"); !r.Allowed {
		t.Errorf("udp/8473 should be allowed: %+v", r)
	}
	out, errOut, code := ctl(t, ep, "", "policy", "explain", "shop/client", "shop/other", "udp/8472")
	if code != 0 || !strings.Contains(out, "verdict: dropped: encapsulated") || !strings.Contains(out, "ingress: not reached") {
		t.Errorf("as text: exit %d\n%s%s", code, out, errOut)
	}
}
