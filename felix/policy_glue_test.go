package felix

import (
	"slices"
	"testing"

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
