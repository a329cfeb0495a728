package felix

import (
	"context"
	"errors"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
)

// DefaultPolicyLogRing is how many policy log records felix keeps.
const DefaultPolicyLogRing = 2048

// ErrNoPolicyLog means the policy log is off on this node (no nflog
// group configured) or policy is disabled.
var ErrNoPolicyLog = errors.New("felix: the policy log is off on this node (policy disabled or no nflog group)")

// PolicyLog hands fn the policy log records after seq (the Seq of the
// last record seen; 0 for all those kept), then, with follow, each new
// batch until ctx ends or fn fails. Records come from the Log action and,
// when drop logging is on, from drops; the kernel rate-limits both
// (PolicyLog.Rate per rule) and felix keeps the last
// PolicyLogRing of them.
func (f *Felix) PolicyLog(ctx context.Context, seq uint64, follow bool, fn func([]flowlog.Record) error) error {
	if f.cfg.Features.DisablePolicy || f.cfg.PolicyLog.Group == 0 {
		return ErrNoPolicyLog
	}
	return f.plog.Follow(ctx, seq, follow, fn)
}

// PolicyLogTail is the seq after which the last n kept records start.
func (f *Felix) PolicyLogTail(n int) uint64 { return f.plog.Tail(n) }

// readPolicyLog reads the policy nflog group in felix's namespace until
// ctx ends, resolving each packet against idx (the running Manager's)
// into the ring. Without the group (another program holds it) the log
// is unavailable and felix goes on enforcing.
func (f *Felix) readPolicyLog(ctx context.Context, netnsFd int, idx *policy.RuleIndex) {
	group := f.cfg.PolicyLog.Group
	r, err := flowlog.Open(netnsFd, group)
	if err != nil {
		f.log.WithError(err).WithField("group", group).Error("policy log unavailable: cannot bind its nflog group")
		return
	}
	defer r.Close()
	h := &netlink.Handle{}
	if netnsFd >= 0 {
		if h, err = netlink.NewHandleAt(netns.NsHandle(netnsFd)); err != nil {
			f.log.WithError(err).Error("policy log: no netlink handle; records will not name interfaces")
			h = nil
		} else {
			defer h.Close()
		}
	}
	ifname := func(i uint32) string {
		if h == nil {
			return ""
		}
		l, err := h.LinkByIndex(int(i))
		if err != nil {
			return ""
		}
		return l.Attrs().Name
	}
	err = r.Run(ctx, func(p flowlog.Packet) { f.plog.Add(flowlog.Resolve(p, idx, ifname)) }, f.plog.Lost)
	if err != nil && ctx.Err() == nil {
		f.log.WithError(err).Error("policy log stopped")
	}
}
