package routetable

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Link is a network device as the route table needs to know it.
type Link struct {
	Name  string
	Index int
	// Up is the administrative state; the kernel refuses routes through
	// a device that is not up.
	Up bool
}

// Op is one write: replace (or add) Route, or delete it when Delete.
type Op struct {
	Delete bool
	Route  KernelRoute
}

// Kernel is the route table's view of the kernel: the seam tests replace
// with a fake. Implementations are used from one goroutine.
type Kernel interface {
	// Links lists all devices.
	Links() ([]Link, error)
	// Routes calls fn for every IPv4 and IPv6 route in table.
	Routes(table int, fn func(KernelRoute)) error
	// LinkRoutes calls fn for every IPv4 and IPv6 route in table whose
	// output device is ifindex.
	LinkRoutes(table, ifindex int, fn func(KernelRoute)) error
	// Write performs ops in order and returns one error per op (nil on
	// success). Deleting a route that is already gone is a success.
	Write(table int, ops []Op) []error
	// Close releases sockets.
	Close()
}

// NetlinkKernel talks to the kernel of one network namespace over
// rtnetlink. Reads go through a reused vishvananda/netlink handle; writes
// go through a batching writer (many requests per sendmsg).
type NetlinkKernel struct {
	h *netlink.Handle
	// strict has strict dump checking on, so the kernel itself filters
	// per-device dumps instead of sending the whole table.
	strict *netlink.Handle
	w      *batchWriter
}

// NewNetlinkKernel opens sockets in the namespace ns (netns.None() for the
// caller's own namespace).
func NewNetlinkKernel(ns netns.NsHandle) (*NetlinkKernel, error) {
	var h *netlink.Handle
	var err error
	// NETLINK_ROUTE only: kernels without xfrm would refuse the default
	// set of families.
	if ns.IsOpen() {
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("routetable: netlink handle: %w", err)
	}
	var strict *netlink.Handle
	if ns.IsOpen() {
		strict, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	} else {
		strict, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err == nil {
		err = strict.SetStrictCheck(true)
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("routetable: netlink handle: %w", err)
	}
	w, err := newBatchWriter(ns)
	if err != nil {
		h.Close()
		strict.Close()
		return nil, err
	}
	return &NetlinkKernel{h: h, strict: strict, w: w}, nil
}

// Handle exposes the read handle for callers that share the namespace.
func (k *NetlinkKernel) Handle() *netlink.Handle { return k.h }

// Close implements Kernel.
func (k *NetlinkKernel) Close() {
	k.h.Close()
	k.strict.Close()
	k.w.close()
}

// Links implements Kernel.
func (k *NetlinkKernel) Links() ([]Link, error) {
	ls, err := k.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("routetable: listing links: %w", err)
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		a := l.Attrs()
		out = append(out, Link{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0})
	}
	return out, nil
}

// Routes implements Kernel. An interrupted dump is an error: the caller
// resyncs again rather than trusting partial state.
func (k *NetlinkKernel) Routes(table int, fn func(KernelRoute)) error {
	filter := &netlink.Route{Table: table}
	for _, fam := range families {
		err := k.h.RouteListFilteredIter(fam, filter, netlink.RT_FILTER_TABLE, func(r netlink.Route) bool {
			fn(fromNetlink(r, fam))
			return true
		})
		if err != nil {
			return fmt.Errorf("routetable: listing %s routes: %w", familyName(fam), err)
		}
	}
	return nil
}

// families are the address families routed programs, one dump each.
var families = []int{netlink.FAMILY_V4, netlink.FAMILY_V6}

func familyName(fam int) string {
	if fam == netlink.FAMILY_V6 {
		return "IPv6"
	}
	return "IPv4"
}

// LinkRoutes implements Kernel.
func (k *NetlinkKernel) LinkRoutes(table, ifindex int, fn func(KernelRoute)) error {
	filter := &netlink.Route{Table: table, LinkIndex: ifindex}
	for _, fam := range families {
		err := k.strict.RouteListFilteredIter(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF, func(r netlink.Route) bool {
			fn(fromNetlink(r, fam))
			return true
		})
		if err != nil {
			return fmt.Errorf("routetable: listing %s routes of device %d: %w", familyName(fam), ifindex, err)
		}
	}
	return nil
}

// Write implements Kernel.
func (k *NetlinkKernel) Write(table int, ops []Op) []error { return k.w.write(table, ops) }

// fromNetlink converts a route of family fam (which names the default
// route, whose Dst netlink leaves nil).
func fromNetlink(r netlink.Route, fam int) KernelRoute {
	k := KernelRoute{
		Type:      uint8(r.Type),
		Protocol:  uint8(r.Protocol),
		Scope:     uint8(r.Scope),
		LinkIndex: r.LinkIndex,
		OnLink:    r.Flags&unix.RTNH_F_ONLINK != 0,
		Priority:  uint32(r.Priority),
		Tos:       uint8(r.Tos),
		Dst:       netip.PrefixFrom(netip.IPv4Unspecified(), 0),
	}
	if fam == netlink.FAMILY_V6 {
		k.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	if r.Dst != nil {
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ones, _ := r.Dst.Mask.Size()
			k.Dst = netip.PrefixFrom(a.Unmap(), ones)
		}
	}
	if r.Gw != nil {
		if a, ok := netip.AddrFromSlice(r.Gw); ok {
			k.Gw = a.Unmap()
		}
	}
	if r.Src != nil {
		if a, ok := netip.AddrFromSlice(r.Src); ok {
			k.Src = a.Unmap()
		}
	}
	return k
}

// IsNotFound reports whether err is the kernel's "no such route/device",
// which every delete treats as success.
func IsNotFound(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}
