// Package routetable keeps the kernel's main IPv4 and IPv6 route tables
// in line with the routes felix wants, touching only routes that carry felix's route
// protocol number.
//
// The model (after Calico felix's routetable): callers set the wanted
// routes, which only marks prefixes dirty; Apply pushes the difference
// between wanted and the cached kernel state in batched netlink writes. A
// full resync re-reads links and routes from the kernel; the owner
// triggers it periodically, and Apply does it by itself after any error.
// A RouteTable is owned by one goroutine; only Programmed may be called
// concurrently.
package routetable

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Config configures a RouteTable.
type Config struct {
	// Protocol marks every route written; only routes with it are ever
	// replaced or deleted.
	Protocol uint8
	// Table is the routing table; 0 means main (254).
	Table int
	// GracePeriod protects routes on devices that appeared less than
	// this long ago: the CNI plugin installs a pod's host route before
	// felix hears of the pod, and must not see it deleted.
	GracePeriod time.Duration
	// GraceFor says which devices the grace period protects (nil: all):
	// felix gives it to pods' devices only, so that its own devices'
	// routes (a tunnel's, WireGuard's) move at once when they must.
	GraceFor func(iface string) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log is the logger; nil means logrus with component=felix.
	Log *logrus.Entry
	// Metrics, if set, is updated on every Apply and resync.
	Metrics *Metrics
}

type linkState struct {
	index     int
	up        bool
	firstSeen time.Time // zero for devices present at the first resync
}

// RouteTable reconciles wanted routes with the kernel.
type RouteTable struct {
	cfg Config
	k   Kernel
	log *logrus.Entry

	wanted  map[netip.Prefix]Route
	byIface map[string]map[netip.Prefix]struct{}

	// Kernel state as of the last resync plus our own successful writes.
	ours    map[netip.Prefix]KernelRoute // our protocol, tos 0: one per prefix
	foreign map[routeKey]uint8           // other protocols at tos 0, by metric
	strays  []KernelRoute                // ours at tos != 0, or a second one for a prefix

	links       map[string]linkState
	linkNames   map[int]string
	resyncedYet bool

	// linkChecks holds devices that appeared after the first resync,
	// with the end of their grace period: then their routes are read
	// from the kernel, so a CNI-installed route nobody wants is found
	// without waiting for the next full resync.
	linkChecks map[int]time.Time

	dirty      map[netip.Prefix]struct{}
	failed     map[netip.Prefix]struct{}
	conflicts  map[netip.Prefix]struct{} // logged once each
	needResync bool
	wakeAt     time.Time

	mu         sync.RWMutex
	programmed map[netip.Prefix]struct{}
}

// New returns a RouteTable that has not read the kernel yet; the first
// Apply does a full resync.
func New(cfg Config, k Kernel) *RouteTable {
	if cfg.Table == 0 {
		cfg.Table = unix.RT_TABLE_MAIN
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = logrus.WithField("component", "felix")
	}
	return &RouteTable{
		cfg: cfg, k: k, log: cfg.Log.WithField("table", cfg.Table),
		wanted: map[netip.Prefix]Route{}, byIface: map[string]map[netip.Prefix]struct{}{},
		ours: map[netip.Prefix]KernelRoute{}, foreign: map[routeKey]uint8{},
		links: map[string]linkState{}, linkNames: map[int]string{}, linkChecks: map[int]time.Time{},
		dirty: map[netip.Prefix]struct{}{}, failed: map[netip.Prefix]struct{}{},
		conflicts: map[netip.Prefix]struct{}{}, programmed: map[netip.Prefix]struct{}{},
		needResync: true,
	}
}

// SetRoutes replaces the whole wanted set. Invalid routes are dropped and
// reported in the returned error; the rest are still taken.
func (rt *RouteTable) SetRoutes(routes map[netip.Prefix]Route) error {
	var errs []error
	for p, old := range rt.wanted {
		if r, ok := routes[p]; !ok || r != old {
			rt.dropWanted(p, old)
		}
	}
	for p, r := range routes {
		if old, ok := rt.wanted[p]; ok && old == r {
			continue
		}
		if err := r.validate(); err != nil || r.Dst != p {
			if err == nil {
				err = fmt.Errorf("routetable: route %v filed under %v", r, p)
			}
			errs = append(errs, err)
			continue
		}
		rt.wanted[p] = r
		rt.dirty[p] = struct{}{}
		if r.Iface != "" {
			set := rt.byIface[r.Iface]
			if set == nil {
				set = map[netip.Prefix]struct{}{}
				rt.byIface[r.Iface] = set
			}
			set[p] = struct{}{}
		}
	}
	return errors.Join(errs...)
}

func (rt *RouteTable) dropWanted(p netip.Prefix, old Route) {
	delete(rt.wanted, p)
	rt.dirty[p] = struct{}{}
	if set := rt.byIface[old.Iface]; set != nil {
		delete(set, p)
		if len(set) == 0 {
			delete(rt.byIface, old.Iface)
		}
	}
}

// Wanted returns the wanted route for p, if any.
func (rt *RouteTable) Wanted(p netip.Prefix) (Route, bool) {
	r, ok := rt.wanted[p]
	return r, ok
}

// Resync makes the next Apply re-read links and routes from the kernel.
func (rt *RouteTable) Resync() { rt.needResync = true }

// WakeAt is when Apply has deferred work (grace periods) that needs
// another Apply; zero when none.
func (rt *RouteTable) WakeAt() time.Time { return rt.wakeAt }

// Programmed reports whether p's wanted route is in the kernel as
// wanted. Safe for concurrent use.
func (rt *RouteTable) Programmed(p netip.Prefix) bool {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	_, ok := rt.programmed[p]
	return ok
}

// NumProgrammed is the number of wanted routes in the kernel as wanted.
func (rt *RouteTable) NumProgrammed() int {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return len(rt.programmed)
}

// OnLinkUpdate records a device change seen by a link watch. The kernel
// drops a device's routes when it goes down or away, so their cache
// entries go too; routes waiting for the device are retried.
func (rt *RouteTable) OnLinkUpdate(l Link, deleted bool) {
	old, known := rt.links[l.Name]
	if oldName, ok := rt.linkNames[l.Index]; ok && oldName != l.Name {
		rt.forgetLink(oldName) // renamed
		known = false
	}
	if deleted || !l.Up {
		rt.dropKernelRoutesVia(l.Index)
	}
	if deleted {
		rt.forgetLink(l.Name)
	} else {
		st := linkState{index: l.Index, up: l.Up, firstSeen: rt.cfg.Now()}
		if known && old.index == l.Index {
			st.firstSeen = old.firstSeen
		} else if rt.cfg.GracePeriod > 0 {
			rt.linkChecks[l.Index] = st.firstSeen.Add(rt.cfg.GracePeriod)
		}
		rt.links[l.Name] = st
		rt.linkNames[l.Index] = l.Name
	}
	for p := range rt.byIface[l.Name] {
		rt.dirty[p] = struct{}{}
	}
	// Gateway routes the kernel refused may resolve through this device.
	for p := range rt.failed {
		rt.dirty[p] = struct{}{}
	}
}

func (rt *RouteTable) forgetLink(name string) {
	if st, ok := rt.links[name]; ok {
		delete(rt.linkChecks, st.index)
		delete(rt.linkNames, st.index)
		delete(rt.links, name)
	}
}

func (rt *RouteTable) dropKernelRoutesVia(ifindex int) {
	for p, k := range rt.ours {
		if k.LinkIndex == ifindex {
			delete(rt.ours, p)
			rt.dirty[p] = struct{}{}
		}
	}
}

// resync re-reads links and routes and marks everything dirty.
func (rt *RouteTable) resync() error {
	start := time.Now()
	links, err := rt.k.Links()
	if err != nil {
		return err
	}
	now := rt.cfg.Now()
	newLinks := make(map[string]linkState, len(links))
	newNames := make(map[int]string, len(links))
	for _, l := range links {
		st := linkState{index: l.Index, up: l.Up, firstSeen: now}
		if !rt.resyncedYet {
			st.firstSeen = time.Time{}
		} else if old, ok := rt.links[l.Name]; ok && old.index == l.Index {
			st.firstSeen = old.firstSeen
		} else if rt.cfg.GracePeriod > 0 {
			rt.linkChecks[l.Index] = now.Add(rt.cfg.GracePeriod)
		}
		newLinks[l.Name] = st
		newNames[l.Index] = l.Name
	}
	ours := make(map[netip.Prefix]KernelRoute, len(rt.ours))
	foreign := map[routeKey]uint8{}
	var strays []KernelRoute
	err = rt.k.Routes(rt.cfg.Table, func(k KernelRoute) {
		rt.classify(k, ours, foreign, &strays)
	})
	if err != nil {
		return err
	}
	rt.links, rt.linkNames, rt.resyncedYet = newLinks, newNames, true
	for idx := range rt.linkChecks {
		if _, ok := newNames[idx]; !ok {
			delete(rt.linkChecks, idx)
		}
	}
	rt.ours, rt.foreign, rt.strays = ours, foreign, strays
	for p := range rt.wanted {
		rt.dirty[p] = struct{}{}
	}
	for p := range rt.ours {
		rt.dirty[p] = struct{}{}
	}
	rt.needResync = false
	d := time.Since(start)
	if rt.cfg.Metrics != nil {
		rt.cfg.Metrics.ResyncSeconds.Observe(d.Seconds())
	}
	rt.log.WithFields(logrus.Fields{"duration": d, "ours": len(ours), "links": len(links)}).Debug("route table resynced")
	return nil
}

// Apply brings the kernel in line with the wanted routes, resyncing
// first when asked to. Routes that could be written were written; a
// route the kernel refused stays dirty and is retried by every Apply. A
// failed resync or a broken netlink exchange makes the next Apply
// resync by itself; after any error the owner should also Resync (with
// backoff), as the cache may be wrong.
func (rt *RouteTable) Apply() error {
	err := rt.apply()
	if err != nil {
		if rt.cfg.Metrics != nil {
			rt.cfg.Metrics.ApplyFailures.Inc()
		}
	}
	if rt.cfg.Metrics != nil {
		rt.cfg.Metrics.Programmed.Set(float64(rt.NumProgrammed()))
	}
	return err
}

func (rt *RouteTable) apply() error {
	if rt.needResync {
		if err := rt.resync(); err != nil {
			return err // needResync stays set
		}
	}
	now := rt.cfg.Now()
	rt.wakeAt = time.Time{}
	if err := rt.checkNewLinks(now); err != nil {
		return err
	}
	var ops []Op
	var opDst []netip.Prefix
	// preDelete marks the ops that remove a route of ours just before
	// the op after them replaces it (deleteFirst).
	preDelete := map[int]bool{}
	inSync := make(map[netip.Prefix]bool, len(rt.dirty))
	for p := range rt.dirty {
		op, write, ok, keepDirty := rt.plan(p, now)
		inSync[p] = ok
		if write {
			if cur, have := rt.ours[p]; have && deleteFirst(cur, op) {
				preDelete[len(ops)] = true
				ops = append(ops, Op{Delete: true, Route: cur})
				opDst = append(opDst, p)
			}
			ops = append(ops, op)
			opDst = append(opDst, p)
		} else if !keepDirty {
			delete(rt.dirty, p)
		}
	}
	strays := len(rt.strays)
	for _, k := range rt.strays {
		ops = append(ops, Op{Delete: true, Route: k})
	}
	rt.strays = nil
	var errs []error
	// retire holds our routes at a metric no longer wanted, whose
	// replacement at the new metric is in: deleted after it, so the
	// prefix is never unrouted.
	var retire []Op
	if len(ops) > 0 {
		results := rt.k.Write(rt.cfg.Table, ops)
		for i, err := range results {
			if i >= len(opDst) { // a stray
				if err != nil {
					rt.needResync = true // finds it again
					errs = append(errs, fmt.Errorf("deleting stale route %v: %w", ops[i].Route.Dst, err))
				}
				continue
			}
			p, op := opDst[i], ops[i]
			if preDelete[i] {
				if err != nil && !IsNotFound(err) {
					rt.needResync = true // the add after it tells the rest
					continue
				}
				delete(rt.ours, p)
				continue
			}
			var ke *KernelError
			if err != nil && !errors.As(err, &ke) {
				rt.needResync = true // the exchange broke: outcome unknown
			}
			if err != nil {
				rt.failed[p] = struct{}{}
				errs = append(errs, fmt.Errorf("%s %v: %w", verb(op), rt.describe(p, op), err))
				continue
			}
			delete(rt.failed, p)
			delete(rt.dirty, p)
			if op.Delete {
				delete(rt.ours, p)
				inSync[p] = false
			} else {
				if prev, had := rt.ours[p]; had && prev.Priority != op.Route.Priority {
					retire = append(retire, Op{Delete: true, Route: prev})
				}
				rt.ours[p] = op.Route
				inSync[p] = true
			}
		}
		errs = append(errs, rt.retire(retire)...)
		if rt.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			rt.log.WithFields(logrus.Fields{"writes": len(ops) - strays, "strays": strays, "errors": len(errs), "first": firstOps(ops, 4)}).Debug("route table applied")
		}
	}
	rt.publish(inSync)
	if len(errs) > 0 {
		for _, e := range errs[:min(len(errs), 5)] {
			rt.log.WithError(e).Warn("route write failed; will resync and retry")
		}
		return fmt.Errorf("routetable: %d route writes failed, first: %w", len(errs), errs[0])
	}
	return nil
}

// retire deletes routes of ours that a route at another metric
// replaced. An IPv4 route at metric 0 is deleted without a metric, which
// the kernel reads as "the lowest": that is the one to go while it
// exists; if something else removed it first, the new route goes
// instead and the resync this asks for puts it back.
func (rt *RouteTable) retire(ops []Op) []error {
	if len(ops) == 0 {
		return nil
	}
	var errs []error
	for i, err := range rt.k.Write(rt.cfg.Table, ops) {
		if err != nil {
			rt.needResync = true
			errs = append(errs, fmt.Errorf("deleting %v at its old metric %d: %w", ops[i].Route.Dst, ops[i].Route.Priority, err))
		}
	}
	return errs
}

func verb(op Op) string {
	if op.Delete {
		return "deleting"
	}
	return "programming"
}

func (rt *RouteTable) describe(p netip.Prefix, op Op) string {
	if r, ok := rt.wanted[p]; ok && !op.Delete {
		return r.String()
	}
	return p.String()
}

// plan decides what to do about one prefix: the op to write (if write),
// whether the kernel already holds the wanted route (inSync), and
// whether the prefix must stay dirty without a write (grace deferral).
func (rt *RouteTable) plan(p netip.Prefix, now time.Time) (op Op, write, inSync, keepDirty bool) {
	want, wanted := rt.wanted[p]
	cur, have := rt.ours[p]
	if !wanted {
		if !have {
			return Op{}, false, false, false
		}
		if rt.inGrace(cur.LinkIndex, now) {
			return Op{}, false, false, true
		}
		return Op{Delete: true, Route: cur}, true, false, false
	}
	if proto, clash := rt.foreign[routeKey{p, want.metric()}]; clash && !(have && cur.Priority == want.metric()) {
		if _, logged := rt.conflicts[p]; !logged {
			rt.conflicts[p] = struct{}{}
			rt.log.WithFields(logrus.Fields{"route": want.String(), "protocol": proto}).Warn(
				"a route for this destination exists that felix does not own; leaving it alone")
		}
		return Op{}, false, false, false
	}
	delete(rt.conflicts, p)
	ifindex := 0
	if want.Iface != "" {
		st, ok := rt.links[want.Iface]
		if !ok || !st.up {
			// Wait for the device; meanwhile a route of ours pointing
			// elsewhere is wrong, unless its device is new.
			if have && !rt.inGrace(cur.LinkIndex, now) {
				return Op{Delete: true, Route: cur}, true, false, false
			}
			return Op{}, false, false, have
		}
		ifindex = st.index
	}
	if have && want.matches(cur, ifindex) {
		return Op{}, false, true, false
	}
	if have && rt.inGrace(cur.LinkIndex, now) {
		return Op{}, false, false, true
	}
	k := KernelRoute{
		Dst: p, Type: want.Type.rtn(), Protocol: rt.cfg.Protocol, Scope: want.scope(),
		LinkIndex: ifindex, Gw: want.Gw, OnLink: want.OnLink, Priority: want.metric(), Src: want.Src,
	}
	return Op{Route: k}, true, false, false
}

// deleteFirst reports whether cur, a route of ours, must be deleted
// before op can replace it. IPv6 checks an onlink gateway against the
// routes already in the table: one for a prefix that holds the gateway
// on another device (a block routed directly before its node's VTEP was
// known, the VTEP being an address of that block) makes the kernel
// refuse the replacement ("Nexthop has invalid gateway or device
// mismatch"). Both ops go in one batch, so the prefix is unrouted only
// between two messages.
func deleteFirst(cur KernelRoute, op Op) bool {
	r := op.Route
	return !op.Delete && r.OnLink && r.Gw.Is6() && cur.Dst.Contains(r.Gw) &&
		(cur.LinkIndex != r.LinkIndex || cur.Type != r.Type)
}

// routeKey is what the kernel tells routes of one prefix apart by (at
// TOS 0): their metric.
type routeKey struct {
	dst    netip.Prefix
	metric uint32
}

// classify files one kernel route. Of felix's protocol at TOS 0, felix
// keeps one per prefix in ours: the one at the wanted metric when there
// are several (a metric change cut short), the others are strays, as
// are routes at another TOS. A foreign route conflicts with felix's only
// at the same metric (the kernel would replace it).
func (rt *RouteTable) classify(k KernelRoute, ours map[netip.Prefix]KernelRoute, foreign map[routeKey]uint8, strays *[]KernelRoute) {
	switch {
	case k.Tos != 0:
		if k.Protocol == rt.cfg.Protocol {
			*strays = append(*strays, k)
		}
	case k.Protocol != rt.cfg.Protocol:
		foreign[routeKey{k.Dst, k.Priority}] = k.Protocol
	default:
		cur, have := ours[k.Dst]
		if !have {
			ours[k.Dst] = k
			return
		}
		if w, wanted := rt.wanted[k.Dst]; wanted && k.Priority == w.metric() && cur.Priority != k.Priority {
			ours[k.Dst], k = k, cur
		}
		*strays = append(*strays, k)
	}
}

// checkNewLinks reads the routes of devices whose grace period ended.
func (rt *RouteTable) checkNewLinks(now time.Time) error {
	for idx, end := range rt.linkChecks {
		if now.Before(end) {
			rt.wakeUpAt(end)
			continue
		}
		err := rt.k.LinkRoutes(rt.cfg.Table, idx, func(k KernelRoute) {
			if cur, have := rt.ours[k.Dst]; have && cur.Priority == k.Priority && cur.Tos == k.Tos {
				return // known already
			}
			rt.classify(k, rt.ours, rt.foreign, &rt.strays)
			rt.dirty[k.Dst] = struct{}{}
		})
		if err != nil {
			return err
		}
		delete(rt.linkChecks, idx)
	}
	return nil
}

func (rt *RouteTable) wakeUpAt(t time.Time) {
	if rt.wakeAt.IsZero() || t.Before(rt.wakeAt) {
		rt.wakeAt = t
	}
}

// inGrace reports whether ifindex is a device first seen less than the
// grace period ago, and if so makes sure Apply is called again after.
func (rt *RouteTable) inGrace(ifindex int, now time.Time) bool {
	if ifindex == 0 || rt.cfg.GracePeriod <= 0 {
		return false
	}
	name, ok := rt.linkNames[ifindex]
	if !ok || (rt.cfg.GraceFor != nil && !rt.cfg.GraceFor(name)) {
		return false
	}
	st := rt.links[name]
	if st.firstSeen.IsZero() {
		return false
	}
	end := st.firstSeen.Add(rt.cfg.GracePeriod)
	if !now.Before(end) {
		return false
	}
	rt.wakeUpAt(end)
	return true
}

func (rt *RouteTable) publish(inSync map[netip.Prefix]bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for p, ok := range inSync {
		if ok {
			rt.programmed[p] = struct{}{}
		} else {
			delete(rt.programmed, p)
		}
	}
}

// firstOps names up to n of ops for a debug line ("del 10.0.0.1/32 dev 7").
func firstOps(ops []Op, n int) string {
	var b strings.Builder
	for i, op := range ops[:min(len(ops), n)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v dev %d", verb(op), op.Route.Dst, op.Route.LinkIndex)
	}
	if len(ops) > n {
		fmt.Fprintf(&b, " and %d more", len(ops)-n)
	}
	return b.String()
}
