package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Throughput runs iperf3 for the given time from one pod to another (TCP,
// one stream) and returns the bits per second the receiver counted. The
// server runs in the destination pod only for this measurement.
func (l *Lab) Throughput(ctx context.Context, from, to Pod, seconds int) (float64, error) {
	srv, err := startProc(to.NS, filepath.Join(l.Dir, "iperf3-"+to.Name+".log"), nil, "iperf3", "-s", "-1", "-p", "5201")
	if err != nil {
		return 0, fmt.Errorf("iperf3 server in %s: %w", to.Name, err)
	}
	l.recordPID(srv)
	defer srv.stop(syscall.SIGTERM, 2*time.Second)
	var out string
	var res iperfResult
	err = l.waitFor(ctx, 10*time.Second, "iperf3 server to accept", func() error {
		var err error
		out, err = nsRun(ctx, from.NS, "iperf3", "-c", to.IP, "-p", "5201", "-t", strconv.Itoa(seconds), "-J")
		res = iperfResult{}
		if jerr := json.Unmarshal([]byte(out), &res); err == nil && jerr != nil {
			err = jerr
		}
		if err == nil && res.Error != "" {
			err = errors.New(res.Error) // e.g. the server not listening yet
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("iperf3 %s -> %s: %w", from.Name, to.Name, err)
	}
	if res.End.SumReceived.BitsPerSecond == 0 {
		return 0, fmt.Errorf("iperf3 %s -> %s: no bits received: %.300s", from.Name, to.Name, out)
	}
	return res.End.SumReceived.BitsPerSecond, nil
}

// iperfResult is the part of iperf3 -J output the lab reads.
type iperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}
