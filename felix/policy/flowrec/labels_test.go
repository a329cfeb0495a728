package flowrec

import (
	"fmt"
	"strings"
	"testing"
)

// TestCapLabels: an end's labels past MaxLabelBytes are cut to those
// that fit, in key order, and marked truncated, without changing the
// model's map; labels that fit are passed as they are.
func TestCapLabels(t *testing.T) {
	small := map[string]string{"app": "web"}
	if got, cut := capLabels(small); cut || len(got) != 1 {
		t.Errorf("small labels: %v truncated=%v", got, cut)
	}
	big := map[string]string{}
	for i := range 300 { // 30 KB, within Kubernetes' object size
		big[fmt.Sprintf("k%03d", i)] = strings.Repeat("v", 96)
	}
	got, cut := capLabels(big)
	n := 0
	for k, v := range got {
		n += len(k) + len(v)
	}
	if !cut || n > MaxLabelBytes || len(got) == 0 || got["k000"] == "" {
		t.Errorf("30 KB of labels: %d bytes in %d labels kept, truncated=%v; want at most %d from k000 on, truncated", n, len(got), cut, MaxLabelBytes)
	}
	if len(big) != 300 {
		t.Errorf("the model's labels were changed: %d left", len(big))
	}
}
