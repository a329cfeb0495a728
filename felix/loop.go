package felix

import (
	"context"
	"errors"
	"fmt"
	"github.com/routed-net/routed/internal/heartbeat"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/natout"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/internal/backoff"
)

// ErrAlreadyRunning is returned by a second concurrent Run.
var ErrAlreadyRunning = errors.New("felix: already running")

// loop is the state of one Run; only its goroutine touches it.
type loop struct {
	f   *Felix
	cfg *Config
	log *logrus.Entry
	st  *state

	// snapshotAt is when the last feed snapshot came, until the
	// dataplane was programmed from it (its time is logged).
	snapshotAt time.Time

	nsh    netns.NsHandle
	kernel *routetable.NetlinkKernel
	h      *netlink.Handle
	rt     *routetable.RouteTable
	nat    *natout.Table
	policy *policy.Manager // nil when policy is disabled
	// policyNames is what policy was given, by kind (policy_glue.go).
	policyNames names
	// undecodable are the records the feed reported as not decoding,
	// by policy.UnreadableKey (unreadable.go): a snapshot's list ends
	// their denies, not those of records felix refused.
	undecodable map[string]bool
	tun         *tunnel
	vx, vx6     *vxlanDev
	plan        *plan
	hostMTU     int
	lastMTU     int // last value written to the MTU file

	resourcesSynced, affinitiesSynced bool
	planDirty, fullResync             bool
	policyDirty                       bool
	tunnelDirty, mtuDirty             bool
	vxlanDirty                        bool
	peeringDirty                      bool
	peeringWake                       time.Time           // a retired peering address is due to go
	sysctlsNeeded                     map[string]struct{} // device names
	sysctlsAll                        bool                // re-check every device
	failures                          int                 // in a row
	retry                             *backoff.Backoff    // paces retryAt; made on the first failure
	retryAt                           time.Time

	// hosts is felix's host endpoint state (policy_hostep.go).
	hosts hostState
	// encapSrc are the allowed sources of tunnel packets beyond the
	// nodes (policy_encap.go).
	encapSrc encapSrcState
	// wgHost is WireGuard host encryption's table and rules
	// (wireguard_host.go), made on first use.
	wgHost *wgHostRouting
}

// Run programs the dataplane until ctx ends, then returns ctx's error
// (or an error opening the namespace/sockets). Routes and other state
// are left in place on return.
//
// Routes are first written once both ReplaceResources and
// ReplaceAffinities have been called, so a restarting felix never
// deletes routes it simply has not heard about yet.
func (f *Felix) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer f.running.Store(false)
	l, err := f.open()
	if err != nil {
		return err
	}
	defer l.close()
	if l.policy != nil {
		// The counter goroutine reads on a socket of its own, in the
		// same namespace, and stops before the namespace handle closes.
		// So does the policy log reader.
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { f.pollCounters(cctx, l.netnsFd()) })
		if f.cfg.PolicyLog.Group != 0 {
			idx := l.policy.Index()
			wg.Go(func() { f.readPolicyLog(cctx, l.netnsFd(), idx) })
		}
		if f.flows != nil {
			idx := l.policy.Index()
			wg.Go(func() { f.runFlows(cctx, l.netnsFd(), idx) })
		} else {
			f.removeFlowRules(l.netnsFd())
		}
		defer func() { cancel(); wg.Wait() }()
	}
	return l.run(ctx)
}

func (f *Felix) open() (*loop, error) {
	l := &loop{f: f, cfg: &f.cfg, log: f.log, st: newState(), nsh: netns.None(),
		sysctlsNeeded: map[string]struct{}{}, fullResync: true, planDirty: true, policyNames: names{}, undecodable: map[string]bool{}}
	var err error
	if f.cfg.NetNSPath != "" {
		if l.nsh, err = netns.GetFromPath(f.cfg.NetNSPath); err != nil {
			return nil, fmt.Errorf("felix: opening netns %s: %w", f.cfg.NetNSPath, err)
		}
	}
	if l.kernel, err = routetable.NewNetlinkKernel(l.nsh); err != nil {
		l.close()
		return nil, err
	}
	l.h = l.kernel.Handle()
	l.st.gateway = l.gatewayFor
	l.tun = &tunnel{h: l.h, log: l.log}
	l.vx = &vxlanDev{h: l.h, log: l.log, fam: vxlanV4}
	l.vx6 = &vxlanDev{h: l.h, log: l.log, fam: vxlanV6}
	if !f.cfg.Features.DisableNATOutgoing {
		fd := -1
		if l.nsh.IsOpen() {
			fd = int(l.nsh)
		}
		if l.nat, err = natout.New(fd); err != nil {
			// Routing matters more than NAT: keep going without it.
			l.log.WithError(err).Error("NAT outgoing is unavailable; pools with natOutgoing are routed but not masqueraded")
			l.nat = nil
		}
	}
	if err := l.openPolicy(); err != nil {
		// Policy is a security boundary: without it felix does not run.
		l.close()
		return nil, fmt.Errorf("felix: network policy dataplane: %w", err)
	}
	l.rt = routetable.New(routetable.Config{
		Protocol: f.cfg.RouteProtocol, GracePeriod: f.cfg.RouteGracePeriod,
		GraceFor: func(iface string) bool { return strings.HasPrefix(iface, f.cfg.WorkloadInterfacePrefix) },
		Log:      l.log, Metrics: f.metrics,
	}, l.kernel)
	f.rt.Store(l.rt)
	return l, nil
}

func (l *loop) close() {
	if l.policy != nil {
		_ = l.policy.Close() // the tables stay and keep enforcing
	}
	if l.nat != nil {
		_ = l.nat.Close()
	}
	if l.kernel != nil {
		l.kernel.Close()
	}
	if l.nsh.IsOpen() {
		_ = l.nsh.Close()
	}
}

func (l *loop) run(ctx context.Context) error {
	l.log.WithFields(logrus.Fields{"protocol": l.cfg.RouteProtocol, "resync": l.cfg.ResyncInterval}).Info("felix starting")
	links, stopLinks := l.subscribeLinks()
	defer func() { stopLinks() }()
	stopAddrs := l.startHostAddrWatch(ctx) // host endpoints found by address follow them (hostep_addrs.go)
	defer stopAddrs()
	resync := time.NewTicker(l.cfg.ResyncInterval)
	defer resync.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var resubscribe <-chan time.Time
	beat := time.NewTicker(heartbeat.Interval)
	defer beat.Stop()
	for {
		l.cfg.Beat.Mark()
		l.takeWork()
		l.apply(ctx)
		timer.Reset(l.nextWake())
		select {
		case <-ctx.Done():
			l.log.Info("felix stopping; the dataplane stays as programmed")
			return ctx.Err()
		case <-l.f.wake:
		case b := <-l.f.batches:
			// Queued behind what the input methods queued before it, and
			// taken whole at the top, before anything is programmed.
			if b.Snapshot {
				l.snapshotAt = time.Now()
			}
			l.f.dispatch().OnBatch(b)
		case u, ok := <-links:
			if !ok {
				// The watch broke (e.g. overflow): events were lost.
				links, resubscribe = nil, time.After(time.Second)
				l.fullResync = true
				continue
			}
			l.onLink(u)
			l.drainLinks(links)
		case <-resubscribe:
			resubscribe = nil
			stopLinks()
			links, stopLinks = l.subscribeLinks()
			l.fullResync = true
		case <-resync.C:
			l.fullResync = true
		case <-timer.C:
		case <-beat.C:
		}
	}
}

// takeWork runs what was queued for the loop. The wake token goes with
// it: work queued after the take sets it again.
func (l *loop) takeWork() {
	select {
	case <-l.f.wake:
	default:
	}
	for _, fn := range l.f.takePending() {
		fn(l)
	}
}

func (l *loop) drainLinks(ch <-chan netlink.LinkUpdate) {
	for {
		select {
		case u, ok := <-ch:
			if !ok {
				return // handled by the next select
			}
			l.onLink(u)
		default:
			return
		}
	}
}

func (l *loop) nextWake() time.Duration {
	next := l.retryAt
	if w := l.rt.WakeAt(); !w.IsZero() && (next.IsZero() || w.Before(next)) {
		next = w
	}
	if w := l.peeringWake; !w.IsZero() && (next.IsZero() || w.Before(next)) {
		next = w
	}
	if next.IsZero() {
		return time.Hour
	}
	return max(time.Until(next), time.Millisecond)
}

// subscribeLinks starts a link watch in felix's namespace.
func (l *loop) subscribeLinks() (<-chan netlink.LinkUpdate, func()) {
	ch := make(chan netlink.LinkUpdate, 1024)
	done := make(chan struct{})
	var stopping atomic.Bool
	nsh := l.nsh
	err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
		Namespace:         &nsh,
		ReceiveBufferSize: 1 << 20,
		ErrorCallback: func(err error) {
			if !stopping.Load() {
				l.log.WithError(err).Warn("link watch failed; resubscribing and resyncing")
			}
		},
	})
	if err != nil {
		l.log.WithError(err).Warn("cannot watch links; relying on periodic resync")
		close(done)
		return nil, func() {}
	}
	return ch, func() {
		if stopping.CompareAndSwap(false, true) {
			close(done)
		}
	}
}

func (l *loop) onLink(u netlink.LinkUpdate) {
	a := u.Link.Attrs()
	deleted := u.Header.Type == unix.RTM_DELLINK
	l.rt.OnLinkUpdate(routetable.Link{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0}, deleted)
	l.hostLink(u.Link, deleted)
	l.noteHostLink(a.Name)
	switch {
	case strings.HasPrefix(a.Name, l.cfg.WorkloadInterfacePrefix):
		if !deleted {
			l.sysctlsNeeded[a.Name] = struct{}{}
			l.peeringDirty = l.peeringDirty || l.peeringWanted(a.Name)
		}
	case a.Name == TunnelDevice:
		l.tunnelDirty = true
	case a.Name == VXLANDevice || a.Name == VXLANDeviceV6:
		l.vxlanDirty = true
	default:
		l.mtuDirty = true
	}
}

// apply pushes everything that is dirty. Failures schedule a retry with
// backoff; the route table resyncs by itself after an error.
func (l *loop) apply(ctx context.Context) {
	if !l.resourcesSynced || !l.affinitiesSynced {
		return // see Run: never act on partial knowledge
	}
	var errs []error
	if !l.retryAt.IsZero() && !time.Now().Before(l.retryAt) {
		l.fullResync = true // retrying after an error: trust nothing cached
		l.retryAt = time.Time{}
	}
	full := l.fullResync
	l.fullResync = false
	if full {
		l.rt.Resync()
		// Recompute too: recursive next hops follow the kernel's routes.
		l.tunnelDirty, l.mtuDirty, l.planDirty, l.vxlanDirty = true, true, true, true
		l.peeringDirty = true
	}
	if l.planDirty {
		old := l.plan
		l.plan = computePlan(l.cfg, l.st)
		l.planDirty = false
		l.f.filters.set(l.plan.rejected)
		for _, n := range l.plan.badIfaces {
			if old == nil || !slices.Contains(old.badIfaces, n) {
				l.log.WithField("endpoint", n).Warnf("not routing: its interface is not a pod device (%q prefix)", l.cfg.WorkloadInterfacePrefix)
			}
		}
		if err := l.rt.SetRoutes(l.plan.routes); err != nil {
			l.log.WithError(err).Warn("some routes are invalid and were skipped")
		}
		if l.nat != nil {
			l.nat.SetPools(l.plan.allPools, l.plan.natPools)
		}
		if old == nil || old.ipip != l.plan.ipip || old.tunnelAddr != l.plan.tunnelAddr || old.nodeAddr != l.plan.nodeAddr {
			l.tunnelDirty, l.mtuDirty = true, true
		}
		if old != nil && old.ipv6 != l.plan.ipv6 {
			l.sysctlsAll = true // the IPv6 settings now apply
		}
		if old == nil || vxlanChanged(old, l.plan) {
			l.vxlanDirty, l.mtuDirty = true, true
		}
	}
	if l.mtuDirty {
		l.detectMTU()
	}
	errs = append(errs, l.applyWireguard(full))
	policyFull := full
	// Strangers' tunnel packets are dropped before a tunnel device
	// comes up (policy_encap.go).
	encapOK := true
	if l.tunnelDirty || l.vxlanDirty {
		ok, applied, err := l.coverEncapSources(ctx, full)
		errs = append(errs, err)
		encapOK = ok
		if applied {
			policyFull = false // done just now
		}
	}
	if l.tunnelDirty && encapOK {
		errs = append(errs, l.applyTunnel())
	}
	if l.vxlanDirty && encapOK {
		// The drop of pods' VXLAN covers the port before a device
		// listens on it (policy_encap.go).
		ok, applied, err := l.coverVXLANPort(ctx, policyFull)
		errs = append(errs, err)
		if applied {
			policyFull = false // done just now
		}
		if ok {
			errs = append(errs, l.applyVXLAN())
		}
	}
	errs = append(errs, l.writeMTU(full))
	errs = append(errs, l.applySysctls(full))
	if !l.peeringWake.IsZero() && !time.Now().Before(l.peeringWake) {
		l.peeringDirty = true
	}
	if l.peeringDirty {
		err := l.applyPeering()
		l.peeringDirty = err != nil
		errs = append(errs, err)
	}
	if l.nat != nil {
		errs = append(errs, l.nat.Apply(full))
	}
	errs = append(errs, l.rt.Apply())
	errs = append(errs, l.applyPolicy(ctx, policyFull))
	if err := errors.Join(errs...); err != nil {
		l.failures++
		if l.retry == nil {
			// Never later than the periodic resync would retry anyway.
			l.retry = backoff.New(500*time.Millisecond, min(defaultMaxRetryBackoff, l.cfg.ResyncInterval))
		}
		wait := l.retry.Next()
		l.retryAt = time.Now().Add(wait)
		l.log.WithError(err).WithField("retryIn", wait).Warn("dataplane update failed")
		return
	}
	if l.failures > 0 {
		l.log.WithField("after", l.failures).Info("dataplane update succeeded again")
		l.retry.Reset()
	}
	l.failures, l.retryAt = 0, time.Time{}
	l.f.applied.Store(true)
	if !l.snapshotAt.IsZero() {
		l.log.WithField("took", time.Since(l.snapshotAt).Round(time.Millisecond)).Info("dataplane programmed from the feed's snapshot")
		l.snapshotAt = time.Time{}
	}
}

// detectMTU finds the host MTU (when not configured).
func (l *loop) detectMTU() {
	mtu := l.cfg.HostMTU
	if mtu == 0 {
		var nodeIP netip.Addr
		if l.plan.nodeAddr.IsValid() {
			nodeIP = l.plan.nodeAddr.Addr()
		}
		detected, dev, err := DetectHostMTU(l.h, nodeIP, l.cfg.MTUInterface)
		if err != nil {
			if l.hostMTU == 0 {
				l.log.WithError(err).WithField("assumed", DefaultHostMTU).Warn("cannot detect the host MTU")
			}
			detected = DefaultHostMTU
		} else if detected != l.hostMTU {
			l.log.WithFields(logrus.Fields{"mtu": detected, "device": dev}).Info("host MTU")
		}
		mtu = detected
	}
	if mtu != l.hostMTU {
		l.hostMTU = mtu
		l.tunnelDirty, l.vxlanDirty = true, true
	}
	l.mtuDirty = false
}

// writeMTU writes the pod MTU file when the value changed, or on a full
// resync when the file does not hold it. IPIP overhead counts only when
// tunl0 is in use (not on a kernel without IPIP).
func (l *loop) writeMTU(full bool) error {
	if l.cfg.Features.DisableMTUFile {
		return nil
	}
	pod := l.hostMTU
	if l.plan.ipip && !l.cfg.Features.DisableIPIP && !l.tun.noIPIP {
		pod = l.cfg.tunnelMTU(l.hostMTU)
	}
	// One MTU for both families: the smallest of the tunnels in use.
	if l.plan.vxlan.on {
		pod = min(pod, l.cfg.vxlanMTU(l.hostMTU, false))
	}
	if l.plan.vxlan6.on {
		pod = min(pod, l.cfg.vxlanMTU(l.hostMTU, true))
	}
	pod = l.wgPodMTU(pod)
	if pod == l.lastMTU && !full {
		return nil
	}
	if cur, err := ReadMTUFile(l.cfg.MTUFile); err == nil && cur == pod {
		l.lastMTU = pod
		return nil
	}
	if err := WriteMTUFile(l.cfg.MTUFile, pod); err != nil {
		l.lastMTU = 0
		return err
	}
	if pod != l.lastMTU {
		l.log.WithFields(logrus.Fields{"mtu": pod, "file": l.cfg.MTUFile}).Info("wrote pod MTU")
	}
	l.lastMTU = pod
	return nil
}

func (l *loop) applyTunnel() error {
	if l.cfg.Features.DisableIPIP {
		l.tunnelDirty = false
		return nil
	}
	link, err := l.tun.reconcile(l.plan.ipip, l.plan.tunnelAddr, l.cfg.tunnelMTU(l.hostMTU))
	l.noteDevice(link)
	if err != nil {
		return err
	}
	l.tunnelDirty = false
	return nil
}

// noteDevice tells the route table about a tunnel device felix just
// reconciled (nil: none), before the link watch reports it.
func (l *loop) noteDevice(link netlink.Link) {
	if link != nil {
		a := link.Attrs()
		l.rt.OnLinkUpdate(routetable.Link{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0}, false)
	}
}

// applySysctls sets the global sysctls and those of new pod devices; on
// a full resync, or when the first IPv6 pool appears, it re-checks every
// pod device.
func (l *loop) applySysctls(full bool) error {
	if l.cfg.Features.DisableSysctls {
		return nil
	}
	var settings []sysctl
	ipv6 := l.plan.ipv6
	if full || l.sysctlsAll {
		settings = globalSysctls(ipv6)
		links, err := l.h.LinkList()
		if err != nil {
			return fmt.Errorf("felix: listing links: %w", err)
		}
		for _, lk := range links {
			if n := lk.Attrs().Name; strings.HasPrefix(n, l.cfg.WorkloadInterfacePrefix) {
				l.sysctlsNeeded[n] = struct{}{}
			}
		}
	}
	for n := range l.sysctlsNeeded {
		settings = append(settings, workloadSysctls(n, ipv6)...)
	}
	if len(settings) == 0 {
		return nil
	}
	changed, err := writeSysctls(l.cfg.NetNSPath, settings)
	if changed > 0 {
		l.log.WithField("changed", changed).Debug("sysctls set")
	}
	if err != nil {
		return err
	}
	clear(l.sysctlsNeeded)
	l.sysctlsAll = false
	return nil
}
