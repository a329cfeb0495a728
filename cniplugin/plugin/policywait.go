package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// errPolicyNotProgrammed: felix did not program the pod's interface in
// time (CNI code 11, try again later).
var errPolicyNotProgrammed = errors.New("routed-cni: network policy not programmed")

// absentLimit bounds the whole wait when routed is not running on the
// node for part of it (its pod restarting, its new image being pulled):
// time without routed does not count against policy_setup_timeout_seconds,
// but the wait never runs past this (or past that timeout, when longer),
// so the plugin answers with the reason well inside the kubelet's
// default 2-minute runtime request timeout instead of being killed.
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
	var fams nftdp.Families
	for _, ip := range ips {
		if ip.To4() != nil {
			fams |= nftdp.FamilyIPv4
		} else {
			fams |= nftdp.FamilyIPv6
		}
	}
	w := policyWait{
		limit:      limit,
		programmed: func() (bool, error) { return nftdp.Programmed(-1, "", c.hostVeth, fams) },
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
		msg := late.msg
		if late.absent > 0 && sock != "" {
			msg += fmt.Sprintf(" (nothing accepted on routed's CNI socket %s for %s of the wait: is routed's pod on this node starting?)", sock, late.absent.Round(time.Second))
		}
		return fmt.Errorf("%w: felix did not program %s for %s %s", errPolicyNotProgrammed, c.hostVeth, c.describe(), msg)
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

// waitTimeout: the wait ran out; absent is how long of it routed was
// not running.
type waitTimeout struct {
	msg    string
	absent time.Duration
}

func (e *waitTimeout) Error() string { return e.msg }

// policyWait is the wait's logic, apart from the kernel and the clock.
type policyWait struct {
	limit      time.Duration // policy_setup_timeout_seconds: counted while routed runs
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
// once limit has passed with routed running, or once max(limit,
// absentLimit) has passed in all.
func (w policyWait) run(ctx context.Context) (waited, absent time.Duration, err error) {
	start := w.now()
	whole := max(w.limit, absentLimit)
	up, checked := true, time.Time{}
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
		if perr != nil {
			lastErr = perr
		}
		why := "is routed running on this node?"
		if lastErr != nil {
			why = lastErr.Error()
		}
		switch {
		case waited-absent >= w.limit && absent == 0:
			return waited, absent, &waitTimeout{msg: fmt.Sprintf("within %s (policy_setup_timeout_seconds): %s", w.limit, why)}
		case waited-absent >= w.limit || waited >= whole:
			return waited, absent, &waitTimeout{
				msg: fmt.Sprintf("within %s, %s of it with routed running (policy_setup_timeout_seconds %d; at most %s in all while routed is away): %s",
					waited.Round(time.Second), (waited - absent).Round(time.Second), int(w.limit/time.Second), whole, why),
				absent: absent,
			}
		}
		if checked.IsZero() || t.Sub(checked) >= routedEvery {
			up, checked = w.routedUp(), t
		}
		if err := w.sleep(ctx, pollEvery); err != nil {
			return waited, absent, err
		}
	}
}
