// Package ipamcore is routed-ipam's logic over pkg/ipam, shared by the
// routed-ipam executable (ipamplugin) and routed-cni, which runs it
// in-process when ipam.type is "routed-ipam" so that an ADD or DEL costs
// one process and one etcd connection instead of two.
//
// Invariants, whoever calls:
//   - An attachment's addresses are held under the handle
//     "<network>.<containerID>" (ipam.PodHandle), one IPv4 /32 each.
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
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// PluginName is the ipam.type that selects routed-ipam.
const PluginName = "routed-ipam"

// DefaultGCGrace spares allocations younger than this from GC: an ADD in
// progress allocates before its endpoint exists and before the runtime
// lists the attachment as valid.
const DefaultGCGrace = time.Minute

// ErrConfig marks an unusable "ipam" section or request (CNI code 7).
var ErrConfig = errors.New("routed-ipam: invalid configuration")

// IPAMConf is the "ipam" section; field names follow calico-ipam.
type IPAMConf struct {
	Type string `json:"type"`
	// IPv4Pools restricts allocation to these pools (names or CIDRs), in
	// order of preference.
	IPv4Pools []string `json:"ipv4_pools"`
	// AssignIPv4 is accepted for Calico compatibility ("true" or unset).
	AssignIPv4 *string `json:"assign_ipv4"`
	// AssignIPv6 "true" is refused: routed is IPv4-only for now.
	AssignIPv6 *string `json:"assign_ipv6"`
	// GCGraceSeconds overrides DefaultGCGrace; 0 means the default,
	// negative means no grace.
	GCGraceSeconds int `json:"gc_grace_seconds"`
	// LockFile is the host-wide IPAM lock (the netconf's top-level
	// "ipam_lock_file", as Calico's); empty means DefaultLockFile.
	LockFile string `json:"-"`
}

// netConf is the part of the network configuration routed-ipam reads
// itself; the type's name appears in JSON decoding errors.
type netConf struct {
	IPAM     IPAMConf `json:"ipam"`
	LockFile string   `json:"ipam_lock_file"`
}

// ParseConf reads the "ipam" section of a network configuration (the
// plugin's whole stdin) and refuses what routed-ipam cannot do. Errors
// wrap ErrConfig.
func ParseConf(stdin []byte) (*IPAMConf, error) {
	var nc netConf
	if err := json.Unmarshal(stdin, &nc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if v := nc.IPAM.AssignIPv6; v != nil && *v == "true" {
		return nil, fmt.Errorf("%w: assign_ipv6 \"true\" is not supported: routed is IPv4-only", ErrConfig)
	}
	nc.IPAM.LockFile = nc.LockFile
	if nc.IPAM.LockFile == "" {
		nc.IPAM.LockFile = DefaultLockFile
	}
	if !filepath.IsAbs(nc.IPAM.LockFile) {
		return nil, fmt.Errorf("%w: ipam_lock_file %q must be an absolute path", ErrConfig, nc.IPAM.LockFile)
	}
	return &nc.IPAM, nil
}

// GCGrace is how old an allocation without an endpoint must be before GC
// releases it.
func (c *IPAMConf) GCGrace() time.Duration {
	switch g := c.GCGraceSeconds; {
	case g < 0:
		return 0
	case g > 0:
		return time.Duration(g) * time.Second
	}
	return DefaultGCGrace
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
}

// New returns routed-ipam over ds, which the caller owns and closes.
func New(ds *datastore.Client, conf *IPAMConf, log *logrus.Entry) *IPAM {
	path := conf.LockFile
	if path == "" {
		path = DefaultLockFile
	}
	return &IPAM{conf: conf, ds: ds, ipam: ipam.New(ds), lock: hostLock{path: path, wait: DefaultLockWait}, log: log}
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
	// ArgsIPs (CNI_ARGS IP=): at most one fixed IPv4 address in all.
	RuntimeIPs, ArgsIPs []string
}

// Add makes the handle of the attachment hold one address (the fixed one
// if requested) and returns it. A retried ADD gets the same address back.
// On failure the handle is released, so nothing stays allocated.
func (m *IPAM) Add(ctx context.Context, a Assignment) ([]netip.Addr, error) {
	ip, err := requestedIP(a.RuntimeIPs, a.ArgsIPs)
	if err != nil {
		return nil, err
	}
	handle := ipam.PodHandle(a.Network, a.ContainerID)
	var addrs []netip.Addr
	err = m.locked(ctx, func(ctx context.Context) error {
		var err error
		addrs, err = m.assign(ctx, handle, ip, a)
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
func (m *IPAM) assign(ctx context.Context, handle string, ip netip.Addr, a Assignment) ([]netip.Addr, error) {
	addrs, err := m.ipam.AutoAssign(ctx, ipam.AssignArgs{
		Node:     a.Node,
		HandleID: handle,
		Num:      1,
		Pools:    m.conf.IPv4Pools,
		IP:       ip,
		Attrs:    ipam.Attributes{Namespace: a.Namespace, Pod: a.Pod},
	})
	if err != nil {
		// A failed assignment may have left part of the request held.
		// With etcd unreachable a release would only wait out another
		// timeout; anything that did land has no endpoint, and GC frees
		// it after its grace period.
		if errors.Is(err, datastore.ErrUnavailable) {
			m.log.Warnf("etcd unreachable: not releasing handle %s now; GC frees anything it holds", handle)
		} else if _, rerr := m.ipam.ReleaseByHandle(ctx, handle); rerr != nil {
			m.log.WithError(rerr).Warnf("could not release handle %s after the failed assignment; GC will", handle)
		}
		return nil, fmt.Errorf("assign an address to handle %s on node %s: %w", handle, a.Node, err)
	}
	return addrs, nil
}

// Release frees every address of the attachment's handle; an unknown
// handle is success, so DEL may run any number of times.
func (m *IPAM) Release(ctx context.Context, network, containerID string) ([]netip.Addr, error) {
	handle := ipam.PodHandle(network, containerID)
	var released []netip.Addr
	err := m.locked(ctx, func(ctx context.Context) error {
		var err error
		released, err = m.ipam.ReleaseByHandle(ctx, handle)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release handle %s: %w", handle, err)
	}
	m.log.WithField("ips", released).Info("released")
	return released, nil
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

// PrevResult reads the ADD result a CHECK carries. Errors wrap ErrConfig.
func PrevResult(nc *types.NetConf) (*current.Result, error) {
	if nc.RawPrevResult == nil {
		return nil, fmt.Errorf("%w: CHECK needs prevResult", ErrConfig)
	}
	if err := version.ParsePrevResult(nc); err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", ErrConfig, err)
	}
	prev, err := current.NewResultFromResult(nc.PrevResult)
	if err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", ErrConfig, err)
	}
	return prev, nil
}

// Result is the IPAM result for the assigned addresses, each a /32 (or
// /128) with no interface: the main plugin places them.
func Result(addrs []netip.Addr) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, a := range addrs {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}})
	}
	return res
}

// requestedIP is the fixed address asked for through runtimeConfig.ips
// or, failing that, CNI_ARGS IP=, if any.
func requestedIP(runtimeIPs, argsIPs []string) (netip.Addr, error) {
	reqs := runtimeIPs
	if len(reqs) == 0 {
		reqs = argsIPs
	}
	switch len(reqs) {
	case 0:
		return netip.Addr{}, nil
	case 1:
	default:
		return netip.Addr{}, fmt.Errorf("%w: %d fixed IPs requested (%s); routed-ipam assigns one IPv4 address", ErrConfig, len(reqs), strings.Join(reqs, ","))
	}
	s := reqs[0]
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%w: requested IP %q is not an IPv4 address", ErrConfig, s)
	}
	return a, nil
}
