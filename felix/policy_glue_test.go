package felix

import (
	"maps"
	"slices"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// TestPolicyReplaceOrderHasEveryKind: a snapshot hands the policy
// dataplane every kind it takes (policyReplace goes by that order).
func TestPolicyReplaceOrderHasEveryKind(t *testing.T) {
	for _, k := range append(slices.Clone(PolicyKinds), api.KindWorkloadEndpoint) {
		if !slices.Contains(policyReplaceOrder, k) {
			t.Errorf("%s is not in policyReplaceOrder", k)
		}
	}
	if len(policyReplaceOrder) != len(PolicyKinds)+1 {
		t.Errorf("policyReplaceOrder %v: a kind more than PolicyKinds and endpoints", policyReplaceOrder)
	}
}

// TestWithoutMarker: routed's unreadable-HostEndpoint label is taken out
// of a copy; the map given is never changed, and one without it is
// returned as is.
func TestWithoutMarker(t *testing.T) {
	in := map[string]string{"a": "1", policy.UnreadableHostLabel: "x"}
	keep := maps.Clone(in)
	out, had := withoutMarker(in)
	if !had || !maps.Equal(out, map[string]string{"a": "1"}) || !maps.Equal(in, keep) {
		t.Errorf("with the marker: %v, %v (given map now %v), want {a:1}, true, the given map unchanged", out, had, in)
	}
	only := map[string]string{policy.UnreadableHostLabel: ""}
	if out, had := withoutMarker(only); !had || out == nil || len(out) != 0 || len(only) != 1 {
		t.Errorf("the marker alone: %v, %v, want an empty map, true", out, had)
	}
	plain := map[string]string{"a": "1"}
	if out, had := withoutMarker(plain); had || !maps.Equal(out, plain) {
		t.Errorf("without the marker: %v, %v, want the map as is, false", out, had)
	}
	if out, had := withoutMarker(nil); had || out != nil {
		t.Errorf("nil: %v, %v, want nil, false", out, had)
	}
}
