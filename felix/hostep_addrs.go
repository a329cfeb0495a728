package felix

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel/nldump"
)

// Host endpoints found by address. A HostEndpoint of this node that
// names no interface governs every interface holding one of its
// expectedIPs (Calico's felix, endpoint_mgr.go resolveHostEndpoints),
// and follows the addresses: felix watches its namespace's addresses
// and looks the interfaces up again on every change, so an address
// added, removed or moved between interfaces (IPv4 or IPv6) moves the
// endpoint with it in the next batch the loop programs, not at the
// next resync. Pods' devices are never among the interfaces (Calico
// leaves workload interfaces out too).

// hostByIP is one of this node's HostEndpoints found by address: the
// interfaces holding one of its expected IPs when last looked (sorted),
// and why none was found, as logged.
type hostByIP struct {
	h      *api.HostEndpoint
	ifaces []string
	why    string
}

// heldAddrs maps addresses of felix's namespace (pods' devices left
// out) to the interfaces holding them, sorted.
type heldAddrs map[netip.Addr][]string

// hostAddrs lists which interfaces of felix's namespace hold the
// wanted addresses (one address dump; only their interfaces are looked
// up, so the cost does not grow with the pods' devices).
func (l *loop) hostAddrs(wanted map[netip.Addr]bool) (heldAddrs, error) {
	held := heldAddrs{}
	if len(wanted) == 0 {
		return held, nil
	}
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return l.h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		// Nothing else may come to look again (the change that broke
		// the dump may be a pod's device, which is not watched): an
		// interface that should be governed would stay open until the
		// resync.
		l.lookAgainSoon()
		return nil, fmt.Errorf("felix: listing addresses: %w", err)
	}
	names := map[int]string{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !wanted[ip.Unmap()] {
			continue
		}
		ip = ip.Unmap()
		name, ok := names[a.LinkIndex]
		if !ok {
			link, err := l.h.LinkByIndex(a.LinkIndex)
			var gone netlink.LinkNotFoundError
			switch {
			case err == nil:
				name = link.Attrs().Name
			case errors.As(err, &gone):
				// gone since the dump: its addresses went with it
			default:
				// Not known to be gone: counting it as holding nothing
				// would leave it unpoliced until something else moved.
				l.lookAgainSoon()
				return nil, fmt.Errorf("felix: the interface holding %s (index %d): %w", ip, a.LinkIndex, err)
			}
			names[a.LinkIndex] = name
		}
		if name == "" || l.isWorkloadIface(name) || slices.Contains(held[ip], name) {
			continue
		}
		held[ip] = append(held[ip], name)
		slices.Sort(held[ip])
	}
	return held, nil
}

// lookAgainSoon queues hostAddrsChanged on the loop in a second (once,
// however many lookups fail meanwhile).
func (l *loop) lookAgainSoon() {
	if !l.hosts.again.CompareAndSwap(false, true) {
		return
	}
	f := l.f
	time.AfterFunc(time.Second, func() {
		f.enqueue(func(l *loop) {
			l.hosts.again.Store(false)
			l.hostAddrsChanged()
		})
	})
}

// isWorkloadIface reports whether name is a pod's device.
func (l *loop) isWorkloadIface(name string) bool {
	p := l.cfg.WorkloadInterfacePrefix
	return p != "" && strings.HasPrefix(name, p)
}

// addrSet is the addresses among ips (an entry that is no address is
// left out: validation refused it).
func addrSet(ips []string) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(ips))
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil {
			out[a.Unmap()] = true
		}
	}
	return out
}

// holding is the interfaces holding any of ips (sorted, each once).
func (h heldAddrs) holding(ips []string) []string {
	var out []string
	for a := range addrSet(ips) {
		out = append(out, h[a]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ifaceHolding is the interface holding ip (the first in name order
// when several do).
func (l *loop) ifaceHolding(ip netip.Addr) (string, error) {
	held, err := l.hostAddrs(map[netip.Addr]bool{ip.Unmap(): true})
	if err != nil {
		return "", err
	}
	if ifs := held[ip.Unmap()]; len(ifs) > 0 {
		return ifs[0], nil
	}
	return "", fmt.Errorf("felix: no interface holds %s", ip)
}

// watchAddrs sets the addresses whose changes the address watch passes
// on: every expected IP of the endpoints found by address, and this
// node's addresses (WireGuard's uplinks). It must run before they are
// looked up, so that a change after the lookup is never missed.
func (l *loop) watchAddrs() {
	w := map[netip.Addr]bool{}
	for _, e := range l.hosts.byIP {
		maps.Copy(w, addrSet(e.h.Spec.ExpectedIPs))
	}
	for _, up := range []func(string) (netip.Prefix, bool){l.st.nodeAddr, l.st.nodeAddr6} {
		if p, ok := up(l.cfg.NodeName); ok {
			w[p.Addr().Unmap()] = true
		}
	}
	l.hosts.watched.Store(&w)
}

// noteFound records the interfaces now holding e's addresses, logs a
// change (a warning while none holds one: the endpoint polices
// nothing) and reports whether they changed.
func (l *loop) noteFound(e *hostByIP, ifaces []string) bool {
	why := ""
	if len(ifaces) == 0 {
		why = fmt.Sprintf("no interface holds any of %v", e.h.Spec.ExpectedIPs)
	}
	changed := !slices.Equal(e.ifaces, ifaces)
	if !changed && why == e.why {
		return false
	}
	lg := l.log.WithField("name", e.h.Metadata.Name).WithField("expectedIPs", e.h.Spec.ExpectedIPs)
	if why != "" {
		lg.WithField("reason", why).Warn("host endpoint: it polices no interface until one holds one of its expected IPs")
	} else {
		lg.WithField("interfaces", ifaces).Info("host endpoint: it governs the interfaces holding its expected IPs")
	}
	e.ifaces, e.why = ifaces, why
	return changed
}

// hostAddrsChanged runs on the loop after an address or host interface
// of felix's namespace changed: the endpoints found by address and
// WireGuard's uplinks are looked up again before the next programming.
func (l *loop) hostAddrsChanged() {
	if l.policy == nil {
		return
	}
	if l.hosts.hold != nil {
		l.hosts.hold()
	}
	l.hosts.peersDirty = true // WireGuard's devices follow the uplink
	l.refindHostEndpoints()
}

// noteHostLink is the link watch's part: a host interface (not a
// pod's) that came, went or was renamed may change which interface
// holds an expected address.
func (l *loop) noteHostLink(name string) {
	if !l.isWorkloadIface(name) && len(l.hosts.byIP) > 0 {
		l.hostAddrsChanged()
	}
}

// startHostAddrWatch watches the addresses of felix's namespace while
// the policy dataplane is on: each burst of changes to a watched
// address (watchAddrs) queues one hostAddrsChanged on the loop, which
// wakes for it. The first watch is opened before it returns, so before
// the loop looks any address up. A watch that breaks is opened again
// (at once, then every second) and the interfaces are looked up again,
// since changes may have been missed. stop ends it and returns once it
// has (before the namespace handle closes).
func (l *loop) startHostAddrWatch(ctx context.Context) (stop func()) {
	if l.policy == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &addrWatch{l: l, ctx: ctx}
	ch, closeWatch := w.subscribe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ch, closeWatch)
	}()
	return func() { cancel(); <-done }
}

// addrWatch is the address watch's goroutine: it reads the loop's
// watched set and queues work, nothing else of the loop.
type addrWatch struct {
	l      *loop
	ctx    context.Context
	queued atomic.Bool
}

// subscribe opens a watch; nil when it cannot (logged).
func (w *addrWatch) subscribe() (<-chan netlink.AddrUpdate, func()) {
	ch := make(chan netlink.AddrUpdate, 1024)
	done := make(chan struct{})
	nsh := w.l.nsh
	err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{
		Namespace:         &nsh,
		ReceiveBufferSize: 1 << 20,
		ErrorCallback: func(err error) {
			if w.ctx.Err() == nil {
				w.l.log.WithError(err).Warn("host endpoints: address watch failed; watching again")
			}
		},
	})
	if err != nil {
		w.l.log.WithError(err).Warn("host endpoints: cannot watch addresses; retrying every second (meanwhile they are looked up at every resync)")
		return nil, nil
	}
	return ch, func() {
		close(done)
		go func() {
			for range ch { // until the watch's reader closes it
			}
		}()
	}
}

// run passes changes on until ctx ends, watching again when the watch
// breaks.
func (w *addrWatch) run(ch <-chan netlink.AddrUpdate, closeWatch func()) {
	for again := 0; ; again++ {
		if ch != nil {
			if again > 0 {
				w.changed() // what happened while there was no watch
			}
			w.drain(ch)
			closeWatch()
		}
		if again > 0 {
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if w.ctx.Err() != nil {
			return
		}
		ch, closeWatch = w.subscribe()
	}
}

// drain passes each update of a watched address on until ctx ends or
// the watch breaks.
func (w *addrWatch) drain(ch <-chan netlink.AddrUpdate) {
	for {
		select {
		case <-w.ctx.Done():
			return
		case u, ok := <-ch:
			if !ok {
				return
			}
			a, _ := netip.AddrFromSlice(u.LinkAddress.IP)
			if set := w.l.hosts.watched.Load(); set != nil && (*set)[a.Unmap()] {
				w.changed()
			}
		}
	}
}

// changed queues one hostAddrsChanged unless one is queued already.
func (w *addrWatch) changed() {
	if w.queued.CompareAndSwap(false, true) {
		w.l.f.enqueue(func(l *loop) {
			w.queued.Store(false)
			l.hostAddrsChanged()
		})
	}
}
