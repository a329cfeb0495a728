package status

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// Paths of the node's network policy rule counters and its policy log
// (?since=SEQ&tail=N&follow=1: newline-separated JSON records).
const (
	PathPolicyCounters   = "/v1/policy/counters"
	PathPolicyLog        = "/v1/policy/log"
	PathPolicyUnreadable = "/v1/policy/unreadable"
)

// UnreadableRecord is a stored policy record that does not decode: felix
// denies the traffic of Scope until it is fixed or deleted.
type UnreadableRecord struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Scope string `json:"scope"`
	// Key is the record's etcd key.
	Key   string `json:"key"`
	Error string `json:"error"`
}

// WithPolicyUnreadable makes the server answer PathPolicyUnreadable from
// list (felix's, on a node).
func (s *Server) WithPolicyUnreadable(list func() []UnreadableRecord) *Server {
	s.unreadable = list
	return s
}

// PolicyUnreadable returns the node's unreadable policy records.
func (c *Client) PolicyUnreadable(ctx context.Context) ([]UnreadableRecord, error) {
	var v []UnreadableRecord
	return v, c.get(ctx, PathPolicyUnreadable, &v)
}

// PolicyLogRecord is one packet the policy dataplane logged, resolved
// to its rule and endpoint.
type PolicyLogRecord = flowlog.Record

// PolicyLogFunc serves the policy log: the records after since (or the
// last tail ones when since is 0 and tail > 0), then, with follow, each
// new batch until ctx ends or emit fails.
type PolicyLogFunc func(ctx context.Context, since uint64, tail int, follow bool, emit func([]PolicyLogRecord) error) error

// PolicyCounter is one policy rule's kernel counter on this node.
type PolicyCounter struct {
	Rule    string `json:"rule"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// LastHit is when felix first saw the counter grow (it reads the
	// counters periodically, 10 s by default, and when asked); nil when
	// it has not grown since felix started watching.
	LastHit *time.Time `json:"lastHit,omitempty"`
	// HitBefore: the counter already held packets when felix started
	// watching (a restart of routed leaves the tables and counters).
	HitBefore bool `json:"hitBefore,omitempty"`
}

// WithPolicyCounters makes the server answer PathPolicyCounters from
// counters (felix's, on a node). Without it the path is not served.
func (s *Server) WithPolicyCounters(counters func(context.Context) ([]PolicyCounter, error)) *Server {
	s.policy = counters
	return s
}

// WithPolicyLog makes the server stream PathPolicyLog from log.
func (s *Server) WithPolicyLog(log PolicyLogFunc) *Server {
	s.policyLog = log
	return s
}

func (s *Server) handlePolicy(mux *http.ServeMux) {
	if s.policy != nil {
		mux.HandleFunc("GET "+PathPolicyCounters, func(w http.ResponseWriter, r *http.Request) {
			v, err := s.policy(r.Context())
			reply(w, v, err)
		})
	}
	if s.policyLog != nil {
		mux.HandleFunc("GET "+PathPolicyLog, s.servePolicyLog)
	}
	if s.unreadable != nil {
		mux.HandleFunc("GET "+PathPolicyUnreadable, func(w http.ResponseWriter, r *http.Request) {
			reply(w, s.unreadable(), nil)
		})
	}
}

// servePolicyLog streams records as JSON lines, flushed per batch.
func (s *Server) servePolicyLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, _ := strconv.ParseUint(q.Get("since"), 10, 64)
	tail, _ := strconv.Atoi(q.Get("tail"))
	follow := q.Get("follow") == "1"
	started := false
	enc := json.NewEncoder(w)
	err := s.policyLog(r.Context(), since, tail, follow, func(recs []PolicyLogRecord) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		for i := range recs {
			if err := enc.Encode(&recs[i]); err != nil {
				return err
			}
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	})
	if !started {
		if err != nil {
			reply(w, nil, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
}

// PolicyLog reads the node's policy log: the records after since (0:
// from the last tail ones, or all kept when tail is 0), handing each to
// fn; with follow it keeps reading new ones until ctx ends.
func (c *Client) PolicyLog(ctx context.Context, since uint64, tail int, follow bool, fn func(PolicyLogRecord) error) error {
	path := fmt.Sprintf("%s?since=%d&tail=%d", PathPolicyLog, since, tail)
	if follow {
		path += "&follow=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routed"+path, nil)
	if err != nil {
		return err
	}
	// A followed log has no end: no overall timeout, only ctx.
	hc := &http.Client{Transport: c.http.Transport}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return c.dialErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorReply(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec PolicyLogRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("status: bad policy log record: %w", err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("status: reading policy log: %w", err)
	}
	return nil
}

// PolicyCounters returns the node's policy rule counters.
func (c *Client) PolicyCounters(ctx context.Context) ([]PolicyCounter, error) {
	var v []PolicyCounter
	return v, c.get(ctx, PathPolicyCounters, &v)
}
