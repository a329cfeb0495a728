package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeWait drives policyWait on a fake clock: routed runs outside the
// [downFrom, downUntil) span, and felix programs the interface at
// programmedAt (negative: never).
type fakeWait struct {
	now                 time.Time
	start               time.Time
	downFrom, downUntil time.Duration
	programmedAt        time.Duration
	asked               int
}

func (f *fakeWait) wait(limit time.Duration) policyWait {
	f.start = time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	f.now = f.start
	return policyWait{
		limit: limit,
		programmed: func() (bool, error) {
			f.asked++
			return f.programmedAt >= 0 && f.now.Sub(f.start) >= f.programmedAt, nil
		},
		routedUp: func() bool {
			at := f.now.Sub(f.start)
			return at < f.downFrom || at >= f.downUntil
		},
		now:   func() time.Time { return f.now },
		sleep: func(_ context.Context, d time.Duration) error { f.now = f.now.Add(d); return nil },
	}
}

func TestPolicyWait(t *testing.T) {
	const limit = 30 * time.Second
	for _, tc := range []struct {
		name                      string
		downFrom, downUntil, prog time.Duration
		// want: the wait's length (within one poll or one routed check),
		// and the error's text ("" : programmed).
		wait, absent time.Duration
		err          string
	}{
		{name: "programmed at once", wait: 0},
		{name: "programmed after 2s", prog: 2 * time.Second, wait: 2 * time.Second},
		{name: "routed runs, felix never programs", prog: -1, wait: limit,
			err: "within 30s (policy_setup_timeout_seconds): is routed running on this node?"},
		// routed away for 45 s (a restart with an image pull) from the
		// start: the 45 s do not count; felix programs 3 s after.
		{name: "routed away 45s, then programmed", downUntil: 45 * time.Second, prog: 48 * time.Second,
			wait: 48 * time.Second, absent: 45 * time.Second},
		// routed goes away 10 s in, for 40 s: 10 + 20 s of it running.
		{name: "routed away in the middle, felix never programs", downFrom: 10 * time.Second, downUntil: 50 * time.Second, prog: -1,
			wait: 70 * time.Second, absent: 40 * time.Second,
			err: "within 1m10s, 30s of it with routed running (policy_setup_timeout_seconds 30; at most 1m40s in all while routed is away)"},
		{name: "routed never back", downUntil: time.Hour, prog: -1, wait: absentLimit, absent: absentLimit,
			err: "within 1m40s, 0s of it with routed running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWait{downFrom: tc.downFrom, downUntil: tc.downUntil, programmedAt: tc.prog}
			waited, absent, err := f.wait(limit).run(context.Background())
			near := func(got, want time.Duration) bool {
				d := got - want
				return d > -routedEvery-pollEvery && d < routedEvery+pollEvery
			}
			if !near(waited, tc.wait) || !near(absent, tc.absent) {
				t.Errorf("waited %s with routed away %s; want %s and %s", waited, absent, tc.wait, tc.absent)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("want programmed, got %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("got error %v; want one with %q", err, tc.err)
			}
			var late *waitTimeout
			if tc.err != "" && (!errors.As(err, &late) || !near(late.absent, tc.absent)) {
				t.Errorf("error %v: want a waitTimeout with routed away %s", err, tc.absent)
			}
		})
	}
}

// TestPolicyWaitCancelled: a cancelled ADD stops waiting with the
// context's error, not a timeout.
func TestPolicyWaitCancelled(t *testing.T) {
	f := &fakeWait{programmedAt: -1}
	w := f.wait(30 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	w.sleep = func(ctx context.Context, d time.Duration) error {
		f.now = f.now.Add(d)
		if f.asked == 3 {
			cancel()
		}
		return ctx.Err()
	}
	_, _, err := w.run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
