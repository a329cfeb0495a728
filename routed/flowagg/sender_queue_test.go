package flowagg_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestSenderQueueBoundedByBytes: while the aggregator is away, a node's
// queue holds at most QueueBytes of batches however few they are; the
// oldest go, counted, and the aggregator, once reached, reports them as
// missing.
func TestSenderQueueBoundedByBytes(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	const queueBytes = 1 << 20
	s, err := flowagg.NewSender(flowagg.SenderConfig{URL: a.url, CertFile: cert, KeyFile: key, CAFile: pki.CAFile, QueueBytes: queueBytes})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for i := range 30 {
		labels[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 100)
	}
	big := func(seq uint64) flowrec.Batch {
		b := batch("node-a", "b1", seq)
		for i := range 100 {
			f := allowedFlow(uint16(1000*seq) + uint16(i))
			f.Src.Labels = labels
			b.Flows = append(b.Flows, f)
		}
		return b
	}
	first := big(1)
	size := first.ApproxBytes()
	for seq := uint64(1); seq <= 10; seq++ {
		s.Sink(big(seq)) // not running: the aggregator is "away"
	}
	kept := queueBytes / size
	if got := s.Dropped(); got != uint64(10-kept) {
		t.Errorf("10 batches of %d bytes into a %d-byte queue: %d dropped, want %d", size, queueBytes, got, 10-kept)
	}
	run(t, s)
	reader := client(t, pki, "", "")
	waitFlows(t, reader, a.url, "", 100*kept)
	_, gaps := flowsOf(read(t, reader, a.url, ""))
	if len(gaps) != 2 || gaps[1].Reason != flowagg.GapMissing {
		t.Errorf("gaps: %+v, want the start and the dropped batches missing", gaps)
	}
}
