package felix

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/wireguard"
)

// DetectHostMTU finds the host MTU: the MTU of iface when given, else of
// the device that holds nodeIP, else of the default route's device. h may
// be nil for the caller's own namespace. It returns the device used.
func DetectHostMTU(h *netlink.Handle, nodeIP netip.Addr, iface string) (int, string, error) {
	if h == nil {
		h = &netlink.Handle{}
	}
	if iface != "" {
		l, err := h.LinkByName(iface)
		if err != nil {
			return 0, "", fmt.Errorf("felix: MTU interface %s: %w", iface, err)
		}
		return l.Attrs().MTU, iface, nil
	}
	if nodeIP.IsValid() {
		addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return 0, "", fmt.Errorf("felix: listing addresses: %w", err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == nodeIP {
				if l, err := h.LinkByIndex(a.LinkIndex); err == nil {
					return l.Attrs().MTU, l.Attrs().Name, nil
				}
			}
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return 0, "", fmt.Errorf("felix: listing routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst == nil || isDefault(r)) && r.LinkIndex > 0 {
			if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
				return l.Attrs().MTU, l.Attrs().Name, nil
			}
		}
	}
	return 0, "", errors.New("felix: no device holds the node address and there is no default route")
}

func isDefault(r netlink.Route) bool {
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// PodMTU is the MTU pods get: the host MTU less the encapsulation
// overhead (20 bytes for IPIP).
func PodMTU(hostMTU int, ipip bool) int {
	if ipip {
		return hostMTU - IPIPOverhead
	}
	return hostMTU
}

// WireguardMTU is the MTU of a WireGuard device: configured when not
// zero, else the host MTU less WireGuard's overhead over IPv4 (60) or
// IPv6 (80), as Calico's defaults. Pods get it when it is the smallest
// of the devices in use.
func WireguardMTU(hostMTU, configured int, v6 bool) int {
	switch {
	case configured != 0:
		return configured
	case v6:
		return hostMTU - wireguard.OverheadV6
	}
	return hostMTU - wireguard.OverheadV4
}

// WriteMTUFile atomically writes mtu (decimal, newline) to path,
// creating its directory.
func WriteMTUFile(path string, mtu int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("felix: MTU file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mtu-*")
	if err != nil {
		return fmt.Errorf("felix: MTU file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = fmt.Fprintf(tmp, "%d\n", mtu)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("felix: MTU file: %w", err)
	}
	return nil
}

// ReadMTUFile reads the MTU felix wrote (for the CNI plugin).
func ReadMTUFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("felix: MTU file: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 68 {
		return 0, fmt.Errorf("felix: MTU file %s: %q is not a valid MTU", path, strings.TrimSpace(string(b)))
	}
	return n, nil
}
