package flowagg_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestSenderSplitsBigBatch: a node's batch past the aggregator's limits
// (here 2,600 flows of a pod whose labels are at the node's cap, about
// 11 MB, and a batch of more than MaxBatchFlows flows) reaches the
// aggregator whole, in pieces: every pod's flows are there, the other
// pod's included, and no batch is reported missing.
func TestSenderSplitsBigBatch(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	s := startSender(t, pki, a.url, "node-1")
	labels := map[string]string{}
	for i := range 40 {
		labels[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", flowrec.MaxLabelBytes/40-3)
	}
	b1 := batch("node-1", "b1", 1, deniedFlow(5432))
	for i := range 2600 {
		f := allowedFlow(uint16(10000 + i))
		f.Src.Labels, f.Src.LabelsTruncated = labels, true
		b1.Flows = append(b1.Flows, f)
	}
	b1.Dropped = map[string]uint64{flowrec.DropGroups: 3}
	b2 := batch("node-1", "b1", 2)
	for i := range flowagg.MaxBatchFlows + 500 {
		b2.Flows = append(b2.Flows, allowedFlow(uint16(30000+i%30000)))
	}
	s.Sink(b1)
	s.Sink(b2)
	// Wait on the window itself: reading 13,000 flows of 4 KiB labels
	// again and again is what would be slow (60 MB a read).
	want := 2 + 1 + 2600 + flowagg.MaxBatchFlows + 500 // the start and dropped gaps, the flows
	testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, func() string {
		if n, _ := a.srv.Window().Stats(); n < want {
			return fmt.Sprintf("%d entries in the window, want %d", n, want)
		}
		return ""
	})
	reader := client(t, pki, "", "")
	fl, _ := flowsOf(read(t, reader, a.url, "port=5432"))
	if len(fl) != 1 {
		t.Errorf("the other pod's flow: %d, want 1", len(fl))
	}
	_, gaps := flowsOf(read(t, reader, a.url, "port=1")) // no flow: the gaps only
	reasons := map[string]int{}
	for _, g := range gaps {
		reasons[g.Reason]++
	}
	if reasons[flowagg.GapMissing] != 0 || reasons[flowagg.GapDropped] != 1 {
		t.Errorf("gaps: %v, want only the start and the node's one dropped count", reasons)
	}
	truncated, _ := flowsOf(read(t, reader, a.url, "port=10000"))
	if len(truncated) != 1 || !truncated[0].Src.LabelsTruncated {
		t.Errorf("a flow of the big-labelled pod is not marked truncated: %+v", truncated)
	}
}
