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
	var bps float64
	err = l.waitFor(ctx, 10*time.Second, "iperf3 server to accept", func() error {
		var err error
		out, err = nsRun(ctx, from.NS, "iperf3", "-c", to.IP, "-p", "5201", "-t", strconv.Itoa(seconds), "-J")
		if err != nil {
			return err
		}
		bps, err = ParseIperf(out)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("iperf3 %s -> %s: %w", from.Name, to.Name, err)
	}
	return bps, nil
}

// ParseIperf reads the receiver's bits per second from `iperf3 -J`
// output; iperf3's own error (e.g. the server not listening yet) is
// returned as an error.
func ParseIperf(out string) (float64, error) {
	var res struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return 0, fmt.Errorf("iperf3 output: %w", err)
	}
	if res.Error != "" {
		return 0, errors.New(res.Error)
	}
	if res.End.SumReceived.BitsPerSecond == 0 {
		return 0, fmt.Errorf("iperf3 received nothing: %.300s", out)
	}
	return res.End.SumReceived.BitsPerSecond, nil
}
