package felix_test

import (
	"context"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
)

// TestPolicyCountersPolled: felix's counter goroutine reads the policy
// tables' counters by itself (every PolicyCounterPoll) and on request.
func TestPolicyCountersPolled(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) {
		c.Features.DisablePolicy = false
		c.PolicyCounterPoll = 50 * time.Millisecond
	})
	h.f.ReplaceResources(map[api.Kind][]api.Resource{api.KindIPPool: nil, api.KindNode: nil, api.KindWorkloadEndpoint: nil})
	h.f.ReplaceAffinities(nil)
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() string {
		cs, err := h.f.PolicyCounters(context.Background())
		if err != nil || len(cs) == 0 {
			return "no counters yet"
		}
		return ""
	})
	time.Sleep(200 * time.Millisecond)
	for _, e := range h.logs.AllEntries() {
		if e.Message == "reading policy counters failed; rules' last hits are not updated" {
			t.Errorf("a periodic read failed: %v", e.Data)
		}
	}
}
