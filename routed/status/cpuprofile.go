package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"strconv"
	"time"
)

// PathCPUProfile serves a CPU profile of the running routed, taken over
// ?seconds=N (1 to MaxCPUProfile; DefaultCPUProfile when absent).
const PathCPUProfile = PathProfile + "cpu"

const (
	DefaultCPUProfile = 10 * time.Second
	MaxCPUProfile     = 5 * time.Minute
)

// serveCPUProfile profiles the process for the asked time, into memory
// first so that a failure is an error answer and not a cut stream. Only
// one CPU profile runs at a time (Go's rule): a second is refused.
func serveCPUProfile(w http.ResponseWriter, r *http.Request) {
	d := DefaultCPUProfile
	if v := r.URL.Query().Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || time.Duration(n)*time.Second > MaxCPUProfile {
			replyCode(w, http.StatusBadRequest, fmt.Errorf("cpu profile: seconds=%q: want a whole number from 1 to %d", v, int(MaxCPUProfile/time.Second)))
			return
		}
		d = time.Duration(n) * time.Second
	}
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		replyCode(w, http.StatusConflict, fmt.Errorf("cpu profile: %w", err))
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
	pprof.StopCPUProfile()
	if r.Context().Err() != nil {
		return // the client went away
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, &buf)
}

// CPUProfile copies a CPU profile of the running routed taken over d to
// w, in pprof's format. It takes d, and fails if another CPU profile is
// being taken.
func (c *Client) CPUProfile(ctx context.Context, d time.Duration, w io.Writer) error {
	secs := int((d + time.Second - 1) / time.Second)
	if secs < 1 || time.Duration(secs)*time.Second > MaxCPUProfile {
		return fmt.Errorf("status: cpu profile of %s: want 1s to %s", d, MaxCPUProfile)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routed"+PathCPUProfile+"?seconds="+strconv.Itoa(secs), nil)
	if err != nil {
		return err
	}
	hc := *c.http
	hc.Timeout = time.Duration(secs)*time.Second + 10*time.Second
	resp, err := hc.Do(req)
	if err != nil {
		return c.dialErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorReply(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("status: cpu profile: %w", err)
	}
	return nil
}
