package flowrec

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestFileSinkLeavesSharedBatchAlone: the collector hands one batch to
// every sink; the file sink, noting the batches its queue lost, must not
// write into the batch's Dropped while another sink (the aggregator's
// sender) encodes it on its own goroutine. Run with -race; without it,
// the caller's map is checked unchanged and the file still says what
// was lost.
func TestFileSinkLeavesSharedBatchAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flows.jsonl")
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var batches []Batch
	for i := range 200 {
		b := Batch{Node: "n", Boot: "b", Seq: uint64(i + 1), Dropped: map[string]uint64{DropGroups: 5}}
		batches = append(batches, b)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // as Sender.send: encode the same batch
			defer wg.Done()
			for range 20 {
				if _, err := json.Marshal(b); err != nil {
					t.Error(err)
				}
			}
		}()
		s.mu.Lock()
		s.dropped = 1 // a batch before this one was lost to a full queue
		s.mu.Unlock()
		s.Sink(b)
		wg.Wait()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if len(b.Dropped) != 1 {
			t.Fatalf("batch %d's Dropped, shared with the other sinks, was changed: %v", b.Seq, b.Dropped)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lost := uint64(0)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l droppedLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		lost += l.Dropped[DropFileQueue]
	}
	if lost == 0 {
		t.Errorf("the file says nothing of the batches its queue lost")
	}
}
