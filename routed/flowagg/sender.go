package flowagg

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/backoff"
)

// SenderConfig says where a node sends its batches.
type SenderConfig struct {
	// URL is the aggregator's base URL (https://host:port).
	URL string
	// CertFile and KeyFile are the node's client certificate (its
	// routed-node etcd identity will do); CAFile verifies the
	// aggregator.
	CertFile, KeyFile, CAFile string
	// Queue is how many batches wait while the aggregator is away (0:
	// 200, ten minutes of 3 s batches); past it the oldest go, which
	// the aggregator reports as a gap (their sequence numbers are
	// missing).
	Queue int
	// QueueBytes bounds the queued batches' size too (ApproxBytes; 0:
	// 64 MiB): past it the oldest go, as past Queue.
	QueueBytes int
}

// Sender sends batches in order, retrying while the aggregator is away.
type Sender struct {
	cfg    SenderConfig
	client *http.Client
	log    *logrus.Entry

	mu      sync.Mutex
	queue   []queued
	bytes   int // the queued batches' ApproxBytes
	dropped uint64
	wake    chan struct{}
}

// NewSender loads the certificates.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if cfg.URL == "" || cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == "" {
		return nil, fmt.Errorf("%w: the aggregator URL, the node's client certificate and key, and the CA are required (batches go over mutual TLS only)", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("flowagg: node certificate: %w", err)
	}
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("flowagg: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, cfg.CAFile)
	}
	if cfg.Queue == 0 {
		cfg.Queue = 200
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = 64 << 20
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &Sender{cfg: cfg, client: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		log: logrus.WithField("component", "flowagg-sender"), wake: make(chan struct{}, 1)}, nil
}

// queued is a batch waiting to be sent, with its ApproxBytes.
type queued struct {
	b     flowrec.Batch
	bytes int
}

// Sink queues a batch (flowrec.Config.Sinks); it never blocks. Past
// the queue's count or bytes the oldest batches go, counted.
func (s *Sender) Sink(b flowrec.Batch) {
	n := b.ApproxBytes()
	s.mu.Lock()
	for len(s.queue) > 0 && (len(s.queue) >= s.cfg.Queue || s.bytes+n > s.cfg.QueueBytes) {
		s.bytes -= s.queue[0].bytes
		s.queue = s.queue[1:]
		s.dropped++
	}
	s.queue = append(s.queue, queued{b, n})
	s.bytes += n
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Dropped is how many batches the queue's cap pushed out.
func (s *Sender) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Run sends queued batches until ctx ends.
func (s *Sender) Run(ctx context.Context) {
	retry := backoff.New(time.Second, 30*time.Second)
	for {
		s.mu.Lock()
		var b *flowrec.Batch
		if len(s.queue) > 0 {
			head := s.queue[0].b // a copy: Sink may drop the queue's head meanwhile
			b = &head
		}
		s.mu.Unlock()
		if b == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			continue
		}
		err := s.send(ctx, b)
		var refused *refusedError
		if errors.As(err, &refused) {
			// The aggregator will never take it (its identity or
			// content): drop it rather than block the ones after.
			s.log.WithError(err).Error("flowagg: the aggregator refused a batch; dropped")
			err = nil
		}
		if err != nil {
			wait := retry.Next()
			s.log.WithError(err).WithField("retryIn", wait).Warn("flowagg: sending flows")
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		retry.Reset()
		s.mu.Lock()
		if len(s.queue) > 0 && s.queue[0].b.Seq == b.Seq && s.queue[0].b.Boot == b.Boot {
			s.bytes -= s.queue[0].bytes
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
	}
}

// send sends b, split into pieces (Batch.Part) where it is past the
// aggregator's limits (MaxBatchFlows, MaxBatchBytes) or the aggregator
// answers 413. A resent batch splits the same way, and the aggregator
// skips the pieces it has.
func (s *Sender) send(ctx context.Context, b *flowrec.Batch) error {
	part := 0
	return s.sendPieces(ctx, *b, &part)
}

func (s *Sender) sendPieces(ctx context.Context, b flowrec.Batch, part *int) error {
	b.Part = *part
	body, err := json.Marshal(&b)
	if err != nil {
		return err
	}
	if len(b.Flows) > 1 && (len(b.Flows) > MaxBatchFlows || len(body) > MaxBatchBytes) {
		return s.split(ctx, b, part)
	}
	err = s.post(ctx, b.Node, body)
	if errors.Is(err, errTooLarge) && len(b.Flows) > 1 {
		return s.split(ctx, b, part)
	}
	if err == nil {
		*part++
	}
	return err
}

// split sends b's flows in two halves; Dropped goes with the first.
func (s *Sender) split(ctx context.Context, b flowrec.Batch, part *int) error {
	h := len(b.Flows) / 2
	first, second := b, b
	first.Flows, second.Flows, second.Dropped = b.Flows[:h], b.Flows[h:], nil
	if err := s.sendPieces(ctx, first, part); err != nil {
		return err
	}
	return s.sendPieces(ctx, second, part)
}

// errTooLarge is the aggregator's 413.
var errTooLarge = errors.New("flowagg: the aggregator found the batch too large")

func (s *Sender) post(ctx context.Context, node string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL+"/v1/nodes/"+url.PathEscape(node)+"/batches", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("aggregator answered %s: %s", resp.Status, bytes.TrimSpace(msg))
		switch resp.StatusCode {
		case http.StatusRequestEntityTooLarge:
			return &refusedError{fmt.Errorf("%w: %w", errTooLarge, err)}
		case http.StatusBadRequest, http.StatusForbidden:
			return &refusedError{err}
		}
		return err
	}
	return nil
}

// refusedError is an answer that sending again will not change.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }
