package status

import (
	"context"
	"net/http"
	"time"
)

// PathPolicyCounters serves the node's network policy rule counters.
const PathPolicyCounters = "/v1/policy/counters"

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

func (s *Server) handlePolicy(mux *http.ServeMux) {
	if s.policy == nil {
		return
	}
	mux.HandleFunc("GET "+PathPolicyCounters, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.policy(r.Context())
		reply(w, v, err)
	})
}

// PolicyCounters returns the node's policy rule counters.
func (c *Client) PolicyCounters(ctx context.Context) ([]PolicyCounter, error) {
	var v []PolicyCounter
	return v, c.get(ctx, PathPolicyCounters, &v)
}
