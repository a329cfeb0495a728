package flowrec

import (
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

type discardCloser struct{ io.Writer }

func (discardCloser) Close() error { return nil }

// TestFileSinkQueueBoundedByBytes: batches waiting for the disk are
// bounded by bytes, not only by count: past maxFileQueueBytes a batch is
// counted as lost (file-queue-batches), never held. The writer is not
// running here: the disk is "stuck".
func TestFileSinkQueueBoundedByBytes(t *testing.T) {
	s := &FileSink{w: discardCloser{io.Discard}, q: make(chan Batch, 64), done: make(chan struct{}), log: logrus.WithField("component", "test")}
	f := Flow{Src: End{Labels: map[string]string{"k": strings.Repeat("v", MaxLabelBytes)}}}
	b := Batch{Node: "n", Flows: make([]Flow, 500)}
	for i := range b.Flows {
		b.Flows[i] = f
	}
	size := b.ApproxBytes()
	for range 20 {
		s.Sink(b)
	}
	kept := maxFileQueueBytes / size
	if len(s.q) != kept || s.dropped != uint64(20-kept) || s.bytes > maxFileQueueBytes {
		t.Errorf("20 batches of %d bytes: %d queued (%d bytes), %d lost; want %d queued, at most %d bytes", size, len(s.q), s.bytes, s.dropped, kept, maxFileQueueBytes)
	}
}
