package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/routed-net/routed/routed/reimport"
)

// PathReimport compares this node's live pods with the datastore: GET
// reports (a dry run), POST also writes the difference (routed/reimport).
const PathReimport = "/v1/ipam/reimport"

// ReimportFunc runs a re-import on the node.
type ReimportFunc func(ctx context.Context, dryRun bool) (*reimport.Report, error)

// WithReimport makes the server answer PathReimport with f (a node's
// routed). Without it the path is not served.
func (s *Server) WithReimport(f ReimportFunc) *Server {
	s.reimport = f
	return s
}

func (s *Server) handleReimport(mux *http.ServeMux) {
	if s.reimport == nil {
		return
	}
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		dry := m == http.MethodGet
		mux.HandleFunc(m+" "+PathReimport, func(w http.ResponseWriter, r *http.Request) {
			rep, err := s.reimport(r.Context(), dry)
			reply(w, rep, err)
		})
	}
}

// Reimport asks the node's routed to compare its live pods with the
// datastore and, unless dryRun, to write the difference.
// It may write to etcd once per pod: it is given longer than a status
// read.
func (c *Client) Reimport(ctx context.Context, dryRun bool) (*reimport.Report, error) {
	method := http.MethodPost
	if dryRun {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://routed"+PathReimport, nil)
	if err != nil {
		return nil, err
	}
	hc := *c.http
	hc.Timeout = 2 * time.Minute
	resp, err := hc.Do(req)
	if err != nil {
		return nil, c.dialErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errorReply(resp)
	}
	var rep reimport.Report
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("status: bad reply: %w", err)
	}
	return &rep, nil
}
