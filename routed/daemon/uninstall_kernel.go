package daemon

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/kernel"
)

// uninstallKernel removes what WireGuard host encryption leaves in the
// kernel of the network namespace at nsPath ("" this process's), once
// routed is uninstalled (issue 40, finding 5): routed's policy-routing
// rules that look up wireguard.RouteTable (protocol 82, both families),
// every route of that table (routed's own table), the devices
// wg.routed and wg-v6.routed, and the nftables table inet
// routed-wireguard. Without this, a kernel device kept encrypting host
// traffic to peers that no longer answer. Anything already gone is
// success; it returns what it removed. Rules that look the table up
// with another protocol are not routed's and stay (logged).
func uninstallKernel(nsPath string) (removed []string, err error) {
	h, nsFd, closeNS, err := openNS(nsPath)
	if err != nil {
		return nil, err
	}
	defer closeNS()
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := h.RuleListFiltered(fam, &netlink.Rule{Table: wireguard.RouteTable}, netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("uninstall: listing the rules of table %d: %w", wireguard.RouteTable, err))
		}
		for _, r := range rules {
			if r.Protocol != kernel.RouteProtocol {
				log.WithField("rule", r.String()).Warn("uninstall: a rule looks up routed's table but is not routed's (protocol is not 82): left in place")
				continue
			}
			if err := h.RuleDel(&r); err != nil && !gone(err) {
				errs = append(errs, fmt.Errorf("uninstall: deleting rule %v: %w", r, err))
				continue
			}
			removed = append(removed, fmt.Sprintf("rule %d lookup %d (%s)", r.Priority, r.Table, famName(fam)))
		}
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: wireguard.RouteTable}, netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("uninstall: listing table %d: %w", wireguard.RouteTable, err))
		}
		for _, r := range routes {
			if err := h.RouteDel(&r); err != nil && !gone(err) {
				errs = append(errs, fmt.Errorf("uninstall: deleting route %v from table %d: %w", r.Dst, wireguard.RouteTable, err))
				continue
			}
			removed = append(removed, fmt.Sprintf("route %v table %d", r.Dst, wireguard.RouteTable))
		}
	}
	for _, name := range []string{wireguard.DeviceV4, wireguard.DeviceV6} {
		link, err := h.LinkByName(name)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if !errors.As(err, &nf) {
				errs = append(errs, fmt.Errorf("uninstall: device %s: %w", name, err))
			}
			continue
		}
		if err := h.LinkDel(link); err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("uninstall: deleting device %s: %w", name, err))
			continue
		}
		removed = append(removed, "device "+name)
	}
	had, err := hasIncomingTable(nsFd)
	if err != nil {
		errs = append(errs, err)
	} else if had {
		m := &wireguard.IncomingMark{NetNSFd: nsFd}
		m.Set(false)
		if err := m.Apply(true); err != nil {
			errs = append(errs, fmt.Errorf("uninstall: %w", err))
		} else {
			removed = append(removed, "nftables tables inet and arp "+wireguard.IncomingTable)
		}
	}
	if had, err := flowrec.RemoveGenRules(nsFd); err != nil {
		errs = append(errs, fmt.Errorf("uninstall: %w", err))
	} else if had {
		removed = append(removed, "nftables table inet "+flowrec.GenTable)
	}
	return removed, errors.Join(errs...)
}

// openNS opens a netlink handle in the namespace at path ("" this
// process's) and returns its descriptor (-1 for this process's).
func openNS(path string) (*netlink.Handle, int, func(), error) {
	if path == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, 0, nil, fmt.Errorf("uninstall: netlink: %w", err)
		}
		return h, -1, h.Close, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("uninstall: network namespace %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, 0, nil, fmt.Errorf("uninstall: netlink in %s: %w", path, err)
	}
	return h, int(ns), func() { h.Close(); ns.Close() }, nil
}

// hasIncomingTable reports whether the namespace (fd, -1 this
// process's) has one of host encryption's nftables tables (inet, arp);
// a kernel without nftables has none.
func hasIncomingTable(fd int) (bool, error) {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return false, nil
	}
	unix.Close(s)
	var opts []nftables.ConnOption
	if fd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(fd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return false, fmt.Errorf("uninstall: nftables: %w", err)
	}
	// Both families: the arp table alone (left by an interrupted
	// uninstall, say) must go too.
	tables, err := c.ListTables()
	if err != nil {
		return false, fmt.Errorf("uninstall: listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == wireguard.IncomingTable && (t.Family == nftables.TableFamilyINet || t.Family == nftables.TableFamilyARP) {
			return true, nil
		}
	}
	return false, nil
}

func famName(fam int) string {
	if fam == netlink.FAMILY_V6 {
		return "IPv6"
	}
	return "IPv4"
}

// gone: what a delete found already deleted.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV)
}
