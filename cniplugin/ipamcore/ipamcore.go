//go:build !cnithin

// Package ipamcore is routed-ipam's logic over pkg/ipam, shared by the
// routed-ipam executable (ipamplugin) and routed-cni, which runs it
// in-process when ipam.type is "routed-ipam" so that an ADD or DEL costs
// one process and one etcd connection instead of two.
//
// Invariants, whoever calls:
//   - An attachment's addresses are held under the handle
//     "<network>.<containerID>" (ipam.PodHandle): at most one IPv4 /32
//     and one IPv6 /128.
//   - A failed assignment releases whatever part of the handle it took,
//     so a failed ADD leaks nothing even if the caller never runs DEL.
//   - Errors map to CNI codes through CodeOf; callers turn them into
//     CNI errors with CNIError so both binaries report the same code and
//     message.
//
// The package must not import cniplugin/plugin: plugin imports it.
package ipamcore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// familyMode says how an ADD treats one address family.
type familyMode int

const (
	familyOff  familyMode = iota // assign_ipvX "false"
	familyAuto                   // unset: assign when a pool of the family serves the node
	familyOn                     // "true", or pools of the family named
)

// mode returns how family (4 or 6) is assigned.
func (c *IPAMConf) mode(family int) familyMode {
	v, pools := c.AssignIPv4, c.IPv4Pools
	if family == 6 {
		v, pools = c.AssignIPv6, c.IPv6Pools
	}
	switch {
	case off(v):
		return familyOff
	case v != nil || len(pools) > 0:
		return familyOn
	}
	return familyAuto
}

// pools returns the configured pools of family.
func (c *IPAMConf) pools(family int) []string {
	if family == 6 {
		return c.IPv6Pools
	}
	return c.IPv4Pools
}

// IPAM serves routed-ipam's verbs over one datastore connection. It is
// meant for one CNI invocation; it is safe for concurrent use. Verbs that
// write (Add, Release, GC) run under the host-wide IPAM lock, and their
// OpTimeout starts once it is held.
type IPAM struct {
	conf *IPAMConf
	ds   *datastore.Client
	ipam *ipam.Client
	lock hostLock
	log  *logrus.Entry
	// Trace, when set, is called with "lock" once the host lock is held
	// (routed-cni's step timings).
	Trace func(step string)
	// hintPath is the block hint file of a per-verb client (New), and
	// hint what it held; "" for a long-lived client (hint.go).
	hintPath string
	hint     []string
}

// New returns routed-ipam over ds, which the caller owns and closes,
// for one CNI verb. Its IPAM client lives for that verb only, under the
// host lock, so the pool view it reads first is trusted for the rest of
// the verb (ipam.WithWatchedPools): a family no pool serves (IPv6 on an
// IPv4 cluster) costs no second read. Writes are still guarded by the
// pools' and the node's revisions. The node's blocks are read with the
// pools, as the last verb on this host left them (hint.go).
func New(ds *datastore.Client, conf *IPAMConf, log *logrus.Entry) *IPAM {
	path := hintFile(lockPath(conf))
	hint := readHint(path)
	m := NewShared(ds, ipam.New(ds, ipam.WithWatchedPools(), ipam.WithBlockHint(hint)), conf, log, nil)
	m.hintPath, m.hint = path, hint
	return m
}

// NewShared returns routed-ipam over a long-lived IPAM client (routed's
// CNI service keeps one, with its caches, for every request). check,
// when set, is called with the lock file once it is locked and before
// anything is read; its error ends the verb (the service checks that it
// locked the very file the plugin would have: see LockFileID).
func NewShared(ds *datastore.Client, ic *ipam.Client, conf *IPAMConf, log *logrus.Entry, check func(*os.File) error) *IPAM {
	return &IPAM{conf: conf, ds: ds, ipam: ic, lock: hostLock{path: lockPath(conf), wait: DefaultLockWait, check: check}, log: log}
}

// lockPath is the host lock file conf names.
func lockPath(conf *IPAMConf) string {
	if conf.LockFile == "" {
		return DefaultLockFile
	}
	return conf.LockFile
}

// locked runs f under the host lock with OpTimeout, counted from when
// the lock is held.
func (m *IPAM) locked(ctx context.Context, f func(ctx context.Context) error) error {
	start := time.Now()
	unlock, err := m.lock.acquire(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if m.Trace != nil {
		m.Trace("lock")
	}
	if waited := time.Since(start); waited > time.Second {
		m.log.WithField("waited", waited.Round(time.Millisecond)).Info("waited for the host IPAM lock")
	}
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	return f(ctx)
}

// Assignment is what one ADD asks for.
type Assignment struct {
	Network, ContainerID, Node string
	// Namespace and Pod are recorded with the allocation (CNI_ARGS
	// K8S_POD_NAMESPACE and K8S_POD_NAME; empty for bare containers).
	Namespace, Pod string
	// RuntimeIPs (runtimeConfig.ips, the "ips" capability) win over
	// ArgsIPs (CNI_ARGS IP=): at most one fixed address per family.
	RuntimeIPs, ArgsIPs []string
	// Extra, when set, is written with the addresses (ipam.AssignArgs'
	// Extra): given every address assigned so far, it is part of each
	// family's assignment transaction, so after a single-stack ADD it
	// was written once, with the address, in one transaction.
	Extra ipam.Extra
	// Undo, when set, is written with the release that follows a failed
	// assignment (it removes what Extra wrote).
	Undo ipam.Extra
}

// famExtra gives the caller's Extra the addresses of the families
// assigned before this one as well.
type famExtra struct {
	ipam.Extra
	before []netip.Addr
}

func (f famExtra) Writes(addrs []netip.Addr) ([]ipam.ExtraWrite, error) {
	return f.Extra.Writes(append(slices.Clone(f.before), addrs...))
}

// Committed passes the commit revision on when the Extra wants it.
func (f famExtra) Committed(rev int64) {
	if c, ok := f.Extra.(ipam.ExtraCommitted); ok {
		c.Committed(rev)
	}
}

// Add makes the handle of the attachment hold one address of each
// family it is assigned (the fixed ones if requested) and returns them,
// IPv4 first. A retried ADD gets the same addresses back. On failure the
// handle is released, so nothing stays allocated.
func (m *IPAM) Add(ctx context.Context, a Assignment) ([]netip.Addr, error) {
	fixed, err := requestedIPs(a.RuntimeIPs, a.ArgsIPs)
	if err != nil {
		return nil, err
	}
	for fam, ip := range fixed {
		if m.conf.mode(fam) == familyOff {
			return nil, fmt.Errorf("%w: fixed address %s requested, but assign_ipv%d is \"false\"", ErrConfig, ip, fam)
		}
	}
	handle := ipam.PodHandle(a.Network, a.ContainerID)
	var addrs []netip.Addr
	err = m.locked(ctx, func(ctx context.Context) error {
		// An assignment is keyed by its handle, so repeating one that
		// etcd may or may not have applied (an election, a member lost
		// mid-request) gets the same addresses: ride that out within
		// OpTimeout.
		err := datastore.RetryUnavailable(ctx, func() error {
			var err error
			addrs, err = m.assign(ctx, handle, fixed, a)
			return err
		})
		if err == nil {
			m.saveHint(ctx, a.Node)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	m.log.WithField("ips", addrs).Info("assigned")
	return addrs, nil
}

// assign runs one assignment under the host lock; on failure it releases
// whatever part of the handle it took.
func (m *IPAM) assign(ctx context.Context, handle string, fixed map[int]netip.Addr, a Assignment) ([]netip.Addr, error) {
	addrs, err := m.assignFamilies(ctx, handle, fixed, a)
	if err != nil {
		// A failed assignment may have left part of the request held.
		// With etcd unreachable a release would only wait out another
		// timeout; anything that did land has no endpoint, and GC frees
		// it after its grace period.
		if errors.Is(err, datastore.ErrUnavailable) {
			m.log.Warnf("etcd unreachable: not releasing handle %s now; GC frees anything it holds", handle)
		} else if _, rerr := m.ipam.ReleaseByHandleWith(ctx, handle, a.Undo); rerr != nil {
			m.log.WithError(rerr).Warnf("could not release handle %s after the failed assignment; GC will", handle)
		}
		return nil, fmt.Errorf("assign an address to handle %s on node %s: %w", handle, a.Node, err)
	}
	return addrs, nil
}

// assignFamilies assigns one address per family in use. A family left
// to auto is skipped when no pool of it serves the node; the ADD fails
// only if it then gets no address at all.
func (m *IPAM) assignFamilies(ctx context.Context, handle string, fixed map[int]netip.Addr, a Assignment) ([]netip.Addr, error) {
	var addrs []netip.Addr
	var skipped []error
	for _, fam := range []int{4, 6} {
		mode := m.conf.mode(fam)
		ip, isFixed := fixed[fam]
		if mode == familyOff {
			continue
		}
		args := ipam.AssignArgs{
			Node:     a.Node,
			HandleID: handle,
			Num:      1,
			Family:   fam,
			Pools:    m.conf.pools(fam),
			IP:       ip,
			Attrs:    ipam.Attributes{Namespace: a.Namespace, Pod: a.Pod},
		}
		if a.Extra != nil {
			args.Extra = famExtra{Extra: a.Extra, before: addrs}
		}
		got, err := m.ipam.AutoAssign(ctx, args)
		if err != nil && mode == familyAuto && !isFixed && errors.Is(err, ipam.ErrNoPool) {
			m.log.Debugf("no IPv%d address: %v (set assign_ipv%d \"true\" to make that an error)", fam, err, fam)
			skipped = append(skipped, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, got...)
	}
	if len(addrs) == 0 {
		return nil, errors.Join(skipped...)
	}
	return addrs, nil
}

// Release frees every address of the attachment's handle; an unknown
// handle is success, so DEL may run any number of times.
func (m *IPAM) Release(ctx context.Context, network, containerID string) ([]netip.Addr, error) {
	return m.ReleaseWith(ctx, network, containerID, nil)
}

// ReleaseWith is Release that also writes extra (when not nil) in the
// release's transaction (ipam.Client.ReleaseByHandleWith).
func (m *IPAM) ReleaseWith(ctx context.Context, network, containerID string, extra ipam.Extra) ([]netip.Addr, error) {
	handle := ipam.PodHandle(network, containerID)
	var released []netip.Addr
	err := m.locked(ctx, func(ctx context.Context) error {
		// A release is keyed by its handle and a gone handle is success,
		// so one etcd did not answer (a stalled member, an election) is
		// repeated, as ADD's assignment is, rather than failing the DEL.
		return datastore.RetryUnavailable(ctx, func() error {
			var err error
			released, err = m.ipam.ReleaseByHandleWith(ctx, handle, extra)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("release handle %s: %w", handle, err)
	}
	m.log.WithField("ips", released).Info("released")
	return released, nil
}

// ReadWith reads the attachment's handle together with keys (nil for an
// absent key) in one round trip, without the host lock, so that a
// ReleaseWith that follows reads only the blocks (pkg/ipam's
// ReadHandleWith): a DEL reads its WorkloadEndpoint this way while the
// kernel deletes the veth.
func (m *IPAM) ReadWith(ctx context.Context, network, containerID string, keys ...string) ([]*mvccpb.KeyValue, error) {
	return m.ipam.ReadHandleWith(ctx, ipam.PodHandle(network, containerID), keys...)
}

// Check verifies that the attachment's handle still holds every address
// of the ADD result.
func (m *IPAM) Check(ctx context.Context, network, containerID string, prev *current.Result) error {
	handle := ipam.PodHandle(network, containerID)
	held, err := m.ipam.IPsByHandle(ctx, handle)
	if err != nil {
		return fmt.Errorf("read handle %s: %w", handle, err)
	}
	for _, ipc := range prev.IPs {
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		found := false
		for _, h := range held {
			found = found || h == a
		}
		if !found {
			return fmt.Errorf("address %s is not allocated to handle %s (it holds %v)", a, handle, held)
		}
	}
	return nil
}

// requestedIPs returns the fixed addresses asked for through
// runtimeConfig.ips or, failing that, CNI_ARGS IP=, by family: at most
// one of each.
func requestedIPs(runtimeIPs, argsIPs []string) (map[int]netip.Addr, error) {
	reqs := runtimeIPs
	if len(reqs) == 0 {
		reqs = argsIPs
	}
	out := map[int]netip.Addr{}
	for _, s := range reqs {
		a, err := netip.ParseAddr(s)
		if p, perr := netip.ParsePrefix(s); perr == nil {
			a, err = p.Addr(), nil
		}
		if err != nil || a.Is4In6() || a.Zone() != "" {
			return nil, fmt.Errorf("%w: requested IP %q is not an IPv4 or IPv6 address", ErrConfig, s)
		}
		fam := 4
		if a.Is6() {
			fam = 6
		}
		if prev, dup := out[fam]; dup {
			return nil, fmt.Errorf("%w: fixed IPs %s and %s requested (%s); routed-ipam assigns one address per family", ErrConfig, prev, a, strings.Join(reqs, ","))
		}
		out[fam] = a
	}
	return out, nil
}
