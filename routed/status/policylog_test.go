package status

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/internal/testenv"
)

// TestPolicyLogStream: the log is streamed as JSON lines: the kept
// records, then, when following, new ones as they come; the stream ends
// with the reader's context, and with the server.
func TestPolicyLogStream(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "routed.sock")
	ring := flowlog.NewRing(4)
	for i := range 6 {
		ring.Add(flowlog.Record{Verdict: "log", DstPort: uint16(8000 + i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := NewServer(sock, fakeProvider{}).WithPolicyLog(func(ctx context.Context, since uint64, tail int, follow bool, emit func([]PolicyLogRecord) error) error {
		if since == 0 && tail > 0 {
			since = ring.Tail(tail)
		}
		return ring.Follow(ctx, since, follow, emit)
	})
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c := NewClient(sock)
	var got []PolicyLogRecord
	read := func(r PolicyLogRecord) error { got = append(got, r); return nil }
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() string {
		got = nil
		if err := c.PolicyLog(context.Background(), 0, 0, false, read); err != nil {
			return fmt.Sprintf("the server never answered the policy log: %v", err)
		}
		return ""
	})
	if len(got) != 4 || got[0].Seq != 3 || got[3].DstPort != 8005 {
		t.Fatalf("kept records: %+v (want the last 4 of 6)", got)
	}
	got = nil
	if err := c.PolicyLog(context.Background(), 0, 2, false, read); err != nil || len(got) != 2 || got[0].Seq != 5 {
		t.Fatalf("tail 2: %+v, %v", got, err)
	}

	fctx, fcancel := context.WithCancel(context.Background())
	recs := make(chan PolicyLogRecord, 10)
	fdone := make(chan error, 1)
	go func() {
		fdone <- c.PolicyLog(fctx, 0, 1, true, func(r PolicyLogRecord) error { recs <- r; return nil })
	}()
	want := func(seq uint64) {
		t.Helper()
		select {
		case r := <-recs:
			if r.Seq != seq {
				t.Fatalf("followed record %+v, want seq %d", r, seq)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("record %d not streamed within 5 s", seq)
		}
	}
	want(6)
	ring.Add(flowlog.Record{Verdict: "drop"})
	want(7)
	fcancel()
	select {
	case err := <-fdone:
		if err != nil {
			t.Fatalf("follow ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end with its context")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
