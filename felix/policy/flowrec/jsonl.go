package flowrec

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/sirupsen/logrus"
	"gopkg.in/natefinch/lumberjack.v2"
)

// FileConfig says where a node writes its flows as JSON lines for log
// shippers: one line per aggregated flow, and one per batch that
// dropped anything ({"kind":"dropped",...}).
type FileConfig struct {
	Path string
	// MaxSizeMB rotates the file at that size (0: 50); MaxBackups
	// rotated files are kept (0: 5), gzip-compressed.
	MaxSizeMB, MaxBackups int
}

// FileSink writes batches to a rotated JSON-lines file. Writing happens
// on a goroutine of its own behind a bounded queue, so the collector
// never waits for the disk; batches past the queue are counted.
type FileSink struct {
	w       io.WriteCloser
	q       chan Batch
	done    chan struct{}
	mu      sync.Mutex
	dropped uint64
	bytes   int // the queued batches' ApproxBytes, at most maxFileQueueBytes
	log     *logrus.Entry
}

// maxFileQueueBytes bounds the batches waiting for the disk beside
// their count.
const maxFileQueueBytes = 32 << 20

// droppedLine is the line a batch with drops adds.
type droppedLine struct {
	Kind    string            `json:"kind"`
	Node    string            `json:"node"`
	Boot    string            `json:"boot"`
	Seq     uint64            `json:"seq"`
	Start   any               `json:"start"`
	End     any               `json:"end"`
	Dropped map[string]uint64 `json:"dropped"`
}

// OpenFile opens (creating its directory, 0700) the rotated file.
func OpenFile(cfg FileConfig) (*FileSink, error) {
	if cfg.Path == "" {
		return nil, fmt.Errorf("%w: flow log file path is empty", ErrConfig)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, fmt.Errorf("flowrec: flow log directory: %w", err)
	}
	if cfg.MaxSizeMB == 0 {
		cfg.MaxSizeMB = 50
	}
	if cfg.MaxBackups == 0 {
		cfg.MaxBackups = 5
	}
	s := &FileSink{w: &lumberjack.Logger{Filename: cfg.Path, MaxSize: cfg.MaxSizeMB, MaxBackups: cfg.MaxBackups, Compress: true},
		q: make(chan Batch, 64), done: make(chan struct{}), log: logrus.WithField("component", "flows-file")}
	go s.run()
	return s, nil
}

// Sink is the Config.Sinks function.
func (s *FileSink) Sink(b Batch) {
	n := b.ApproxBytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes+n > maxFileQueueBytes && s.bytes > 0 {
		s.dropped++
		return
	}
	select {
	case s.q <- b:
		s.bytes += n
	default:
		s.dropped++
	}
}

func (s *FileSink) run() {
	defer close(s.done)
	for b := range s.q {
		s.mu.Lock()
		lostBatches := s.dropped
		s.dropped = 0
		s.mu.Unlock()
		if lostBatches > 0 {
			// The batch is shared with the other sinks (the sender
			// encodes it on its own goroutine): add to a copy.
			d := make(map[string]uint64, len(b.Dropped)+1)
			maps.Copy(d, b.Dropped)
			d[DropFileQueue] += lostBatches
			b.Dropped = d
		}
		if err := WriteBatch(s.w, b); err != nil {
			s.log.WithError(err).Warn("flowrec: writing the flow log")
		}
		s.mu.Lock()
		s.bytes -= b.ApproxBytes()
		s.mu.Unlock()
	}
}

// Close writes what is queued and closes the file.
func (s *FileSink) Close() error {
	close(s.q)
	<-s.done
	return s.w.Close()
}

// WriteBatch writes a batch as JSON lines.
func WriteBatch(w io.Writer, b Batch) error {
	enc := json.NewEncoder(w)
	for i := range b.Flows {
		if err := enc.Encode(&b.Flows[i]); err != nil {
			return err
		}
	}
	if len(b.Dropped) > 0 {
		return enc.Encode(droppedLine{Kind: "dropped", Node: b.Node, Boot: b.Boot, Seq: b.Seq, Start: b.Start, End: b.End, Dropped: b.Dropped})
	}
	return nil
}
