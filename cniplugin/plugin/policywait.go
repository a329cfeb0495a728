package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/routed-net/routed/pkg/kernel/policytable"
)

// errPolicyNotProgrammed: felix did not program the pod's interface in
// time (CNI code 11, try again later).
var errPolicyNotProgrammed = errors.New("routed-cni: network policy not programmed")

// absentLimit bounds the ADD, counted from the plugin's start, when
// routed is not running on the node for part of the wait (its pod
// restarting, its new image being pulled): time without routed does not
// count against policy_setup_timeout_seconds, but the wait never runs
// past this (nor past that timeout counted from the wait's start, when
// later), so the plugin answers with the reason inside the kubelet's
// default 2-minute runtime request timeout instead of being killed
// before it can undo its work.
const absentLimit = 100 * time.Second

// waitForPolicy returns once felix has programmed the pod's host
// interface in the policy tables (conf.PolicySetupTimeoutSeconds > 0),
// so that ADD returns with the pod's policy, or its profiles' allow, in
// force. Until then the interface passes nothing (the tables drop every
// cali* interface they do not know), so the wait decides only when the
// pod becomes reachable, never whether a packet slips through. felix
// programs the interface in the tables of the pod's address families
// only (ips), so only those are asked.
//
// The timeout counts only while routed runs on the node, as seen by its
// CNI socket accepting: a pod created while routed restarts waits for the
// new routed instead of failing its sandbox (up to absentLimit). With
// routed_socket "none" the plugin cannot tell, and every second counts.
func waitForPolicy(ctx context.Context, c *call, ips []net.IP) error {
	limit := time.Duration(c.conf.PolicySetupTimeoutSeconds) * time.Second
	if limit <= 0 {
		return nil
	}
	var v4, v6 bool
	for _, ip := range ips {
		if ip.To4() != nil {
			v4 = true
		} else {
			v6 = true
		}
	}
	latest := c.started.Add(absentLimit)
	if l := time.Now().Add(limit); l.After(latest) || c.started.IsZero() {
		latest = l
	}
	w := policyWait{
		limit:      limit,
		latest:     latest,
		programmed: func() (bool, error) { return policytable.Programmed(-1, "", c.hostVeth, v4, v6) },
		routedUp:   func() bool { return true },
		now:        time.Now,
		sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
				return nil
			}
		},
	}
	sock := ""
	if c.conf.RoutedSocket != SocketOff {
		sock = c.conf.Socket()
		w.routedUp = func() bool { return socketAccepts(sock) }
	}
	waited, absent, err := w.run(ctx)
	var late *waitTimeout
	if errors.As(err, &late) {
		return fmt.Errorf("%w: felix did not program %s for %s %s", errPolicyNotProgrammed, c.hostVeth, c.describe(), late.explain(limit, sock))
	}
	if err != nil {
		return err
	}
	lg := c.log.WithField("waited", waited.Round(time.Millisecond))
	if absent > 0 {
		lg.WithField("routedAbsent", absent.Round(time.Millisecond)).Info("policy programmed once routed was back on the node")
	} else {
		lg.Debug("policy programmed")
	}
	return nil
}

// socketAccepts reports whether routed accepts connections on its CNI
// socket: it is running on this node.
func socketAccepts(path string) bool {
	conn, err := net.DialTimeout("unix", path, 200*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// waitTimeout: the wait ran out after waited, absent of it without
// routed; lastErr is the last error reading the tables (nil: they read
// fine), seenUp whether routed was seen running at all.
type waitTimeout struct {
	waited, absent time.Duration
	lastErr        error
	seenUp         bool
}

func (e *waitTimeout) Error() string { return e.explain(0, "") }

// explain says why the wait ran out, for a timeout of limit and routed's
// CNI socket sock ("": the plugin cannot tell whether routed runs).
func (e *waitTimeout) explain(limit time.Duration, sock string) string {
	var msg string
	if e.absent == 0 {
		msg = fmt.Sprintf("within %s (policy_setup_timeout_seconds)", e.waited.Round(time.Second))
	} else {
		msg = fmt.Sprintf("within %s, %s of it with routed running (policy_setup_timeout_seconds %d; an ADD waits at most %s while routed is away)",
			e.waited.Round(time.Second), (e.waited - e.absent).Round(time.Second), int(limit/time.Second), absentLimit)
	}
	switch {
	case e.lastErr != nil:
		msg += ": " + e.lastErr.Error()
	case sock == "":
		msg += ": is routed running on this node?"
	case e.absent > 0 && !e.seenUp:
		msg += fmt.Sprintf(": nothing accepted on routed's CNI socket %s: is routed's pod on this node starting, or does routed serve another socket (its --cni-socket)?", sock)
	case e.absent > 0:
		msg += fmt.Sprintf(": routed was away %s of the wait (its CNI socket %s did not accept), and once back did not program the interface: see routed's log", e.absent.Round(time.Second), sock)
	default:
		msg += ": routed runs on this node (its CNI socket accepts) but has not programmed the interface: see routed's log"
	}
	return msg
}

// policyWait is the wait's logic, apart from the kernel and the clock.
type policyWait struct {
	limit      time.Duration // policy_setup_timeout_seconds: counted while routed runs
	latest     time.Time     // the wait ends by then in any case (zero: start + max(limit, absentLimit))
	programmed func() (bool, error)
	routedUp   func() bool
	now        func() time.Time
	sleep      func(context.Context, time.Duration) error
}

// How often the wait asks the kernel, and how often it asks whether
// routed runs (a connection to its socket costs it an accept).
const (
	pollEvery   = 5 * time.Millisecond
	routedEvery = 250 * time.Millisecond
)

// run waits until programmed says yes and returns how long it waited and
// for how much of that routed was not running. It fails (*waitTimeout)
// once limit has passed with routed running, or at latest.
func (w policyWait) run(ctx context.Context) (waited, absent time.Duration, err error) {
	start := w.now()
	latest := w.latest
	if latest.IsZero() {
		latest = start.Add(max(w.limit, absentLimit))
	}
	up, seenUp, checked := true, false, time.Time{}
	last := start
	var lastErr error
	for {
		ok, perr := w.programmed()
		t := w.now()
		if !up {
			absent += t.Sub(last)
		}
		last = t
		waited = t.Sub(start)
		if ok {
			return waited, absent, nil
		}
		lastErr = perr
		if waited-absent >= w.limit || !t.Before(latest) {
			return waited, absent, &waitTimeout{waited: waited, absent: absent, lastErr: lastErr, seenUp: seenUp}
		}
		if checked.IsZero() || t.Sub(checked) >= routedEvery {
			up, checked = w.routedUp(), t
			seenUp = seenUp || up
		}
		if err := w.sleep(ctx, pollEvery); err != nil {
			return waited, absent, err
		}
	}
}
