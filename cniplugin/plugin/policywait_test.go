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
	const sock = "/run/routed/cni.sock"
	errNft := errors.New("reading routed-policy from-wl-dispatch: netlink: permission denied")
	for _, tc := range []struct {
		name                      string
		limit                     time.Duration // 0: limit
		latest                    time.Duration // 0: none given
		downFrom, downUntil, prog time.Duration
		nftErrUntil               time.Duration // programmed fails until then
		// want: the wait's length (within one poll or one routed check),
		// and the explanation's text ("" : programmed).
		wait, absent time.Duration
		err          string
	}{
		{name: "programmed at once", wait: 0},
		{name: "programmed after 2s", prog: 2 * time.Second, wait: 2 * time.Second},
		{name: "routed runs, felix never programs", prog: -1, wait: limit,
			err: "within 30s (policy_setup_timeout_seconds): routed runs on this node (its CNI socket accepts) but has not programmed the interface"},
		// An early error reading the tables is not blamed once reads work.
		{name: "tables unreadable at first", prog: -1, nftErrUntil: 5 * time.Second, wait: limit,
			err: "within 30s (policy_setup_timeout_seconds): routed runs on this node"},
		{name: "tables unreadable throughout", prog: -1, nftErrUntil: time.Hour, wait: limit,
			err: "within 30s (policy_setup_timeout_seconds): " + errNft.Error()},
		// routed away for 45 s (a restart with an image pull) from the
		// start: the 45 s do not count; felix programs 3 s after.
		{name: "routed away 45s, then programmed", downUntil: 45 * time.Second, prog: 48 * time.Second,
			wait: 48 * time.Second, absent: 45 * time.Second},
		// routed goes away 10 s in, for 40 s: 10 + 20 s of it running.
		{name: "routed away in the middle, felix never programs", downFrom: 10 * time.Second, downUntil: 50 * time.Second, prog: -1,
			wait: 70 * time.Second, absent: 40 * time.Second,
			err: "within 1m10s, 30s of it with routed running (policy_setup_timeout_seconds 30; an ADD waits at most 1m40s while routed is away): routed was away 40s of the wait"},
		{name: "routed never there", downUntil: time.Hour, prog: -1, wait: absentLimit, absent: absentLimit,
			err: "within 1m40s, 0s of it with routed running (policy_setup_timeout_seconds 30; an ADD waits at most 1m40s while routed is away): nothing accepted on routed's CNI socket " + sock},
		// The ADD's earlier steps took 90 s: 10 s are left of the 100.
		{name: "bounded from the ADD's start", downUntil: time.Hour, prog: -1, latest: 10 * time.Second, wait: 10 * time.Second, absent: 10 * time.Second,
			err: "within 10s, 0s of it with routed running"},
		// A timeout over 100 s is the bound itself.
		{name: "timeout over the bound", limit: 120 * time.Second, downUntil: time.Hour, prog: -1, wait: 120 * time.Second, absent: 120 * time.Second,
			err: "within 2m0s, 0s of it with routed running (policy_setup_timeout_seconds 120;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWait{downFrom: tc.downFrom, downUntil: tc.downUntil, programmedAt: tc.prog}
			l := limit
			if tc.limit > 0 {
				l = tc.limit
			}
			w := f.wait(l)
			if tc.latest > 0 {
				w.latest = f.start.Add(tc.latest)
			}
			prog := w.programmed
			w.programmed = func() (bool, error) {
				ok, _ := prog()
				if f.now.Sub(f.start) < tc.nftErrUntil {
					return false, errNft
				}
				return ok, nil
			}
			waited, absent, err := w.run(context.Background())
			near := func(got, want time.Duration) bool {
				d := got - want
				return d > -routedEvery-pollEvery && d < routedEvery+pollEvery
			}
			if !near(waited, tc.wait) || !near(absent, tc.absent) {
				t.Errorf("waited %s with routed away %s; want %s and %s", waited, absent, tc.wait, tc.absent)
			}
			var late *waitTimeout
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("want programmed, got %v", err)
			case tc.err != "" && !errors.As(err, &late):
				t.Errorf("got %v; want a waitTimeout", err)
			case tc.err != "":
				if got := late.explain(l, sock); !strings.Contains(got, tc.err) {
					t.Errorf("got %q; want it to contain %q", got, tc.err)
				}
			}
		})
	}
}

// TestPolicyWaitCannotTell: with routed_socket "none" the plugin cannot
// see routed, and says so.
func TestPolicyWaitCannotTell(t *testing.T) {
	e := &waitTimeout{waited: 30 * time.Second}
	if got, want := e.explain(30*time.Second, ""), "within 30s (policy_setup_timeout_seconds): is routed running on this node?"; got != want {
		t.Errorf("got %q, want %q", got, want)
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
