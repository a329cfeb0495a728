package flowrec

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/sirupsen/logrus"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"github.com/vishvananda/netns"
)

// EnableAccounting turns on conntrack's packet and byte counters
// (net.netfilter.nf_conntrack_acct) in the namespace (-1: the
// caller's); connections that began before count from zero.
func EnableAccounting(netnsFd int) error {
	write := func() error {
		return os.WriteFile("/proc/sys/net/netfilter/nf_conntrack_acct", []byte("1"), 0)
	}
	if netnsFd < 0 {
		if err := write(); err != nil {
			return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
		}
		return nil
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(netnsFd)); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	// /proc/sys/net follows the thread's namespace.
	err = write()
	if rerr := netns.Set(orig); rerr != nil {
		// Leave the thread locked: it dies with this goroutine.
		return fmt.Errorf("flowrec: restoring the namespace: %w", rerr)
	}
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("flowrec: enabling conntrack accounting: %w", err)
	}
	return nil
}

// listenConntrack subscribes to conntrack NEW and DESTROY events in the
// namespace. A socket the kernel overran is counted in lost and
// replaced (the events it missed are lost: their connections end
// without a record, their counts in the batch's dropped).
func listenConntrack(ctx context.Context, netnsFd int, lost *atomic.Uint64, log *logrus.Entry) (<-chan ctEvent, error) {
	cfg := &netlink.Config{}
	if netnsFd >= 0 {
		cfg.NetNS = netnsFd
	}
	dial := func() (*conntrack.Conn, chan conntrack.Event, chan error, error) {
		conn, err := conntrack.Dial(cfg)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("flowrec: conntrack socket: %w", err)
		}
		_ = conn.SetReadBuffer(8 << 20)
		evs := make(chan conntrack.Event, 4096)
		errs, err := conn.Listen(evs, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew, netfilter.GroupCTDestroy})
		if err != nil {
			conn.Close()
			return nil, nil, nil, fmt.Errorf("flowrec: conntrack events: %w", err)
		}
		return conn, evs, errs, nil
	}
	conn, evs, errs, err := dial()
	if err != nil {
		return nil, err
	}
	out := make(chan ctEvent, 4096)
	go func() {
		defer func() { conn.Close() }()
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				lost.Add(1)
				log.WithError(err).Warn("flowrec: conntrack event socket failed; resubscribing")
				conn.Close()
				for {
					if conn, evs, errs, err = dial(); err == nil {
						break
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Second):
					}
				}
			case ev := <-evs:
				if ev.Flow == nil {
					continue
				}
				var destroy bool
				switch ev.Type {
				case conntrack.EventNew:
				case conntrack.EventDestroy:
					destroy = true
				default:
					continue
				}
				e := ctEvent{key: keyOfConn(ev.Flow), destroy: destroy, flow: *ev.Flow, at: time.Now()}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
