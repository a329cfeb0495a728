package felix

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/routed-net/routed/pkg/kernel"
)

// sysctl is one /proc/sys setting; path is relative to /proc/sys.
type sysctl struct {
	path, value string
	// optional settings belong to a device that may vanish meanwhile.
	optional bool
}

// globalSysctls turn on forwarding: IPv4 always, IPv6 when an IPv6 pool
// exists (as Calico's felix does). With IPv6 forwarding on, the kernel
// ignores router advertisements on interfaces whose accept_ra is 1: a
// node that takes its own IPv6 default route from RAs needs accept_ra=2
// on that interface.
func globalSysctls(ipv6 bool) []sysctl {
	out := []sysctl{{path: "net/ipv4/ip_forward", value: "1"}}
	if ipv6 {
		out = append(out, sysctl{path: "net/ipv6/conf/all/forwarding", value: "1"})
	}
	return out
}

// workloadSysctls are what a pod's host-side device keeps: the list the
// CNI plugin sets at creation (kernel.HostDeviceSysctls), re-asserted.
// They are optional: the device may vanish meanwhile.
func workloadSysctls(iface string, ipv6 bool) []sysctl {
	var out []sysctl
	for _, s := range kernel.HostDeviceSysctls(iface, ipv6) {
		out = append(out, sysctl{path: s.Path, value: s.Value, optional: true})
	}
	return out
}

// writeSysctls sets each value that differs. /proc/sys/net shows the
// network namespace of the thread that opens it, so when nsPath is set
// all reads and writes happen on a thread locked into that namespace.
func writeSysctls(nsPath string, settings []sysctl) (changed int, err error) {
	do := func() error {
		var errs []error
		for _, s := range settings {
			p := filepath.Join("/proc/sys", s.path)
			cur, err := os.ReadFile(p)
			if err == nil && strings.TrimSpace(string(cur)) == s.value {
				continue
			}
			if err == nil {
				err = os.WriteFile(p, []byte(s.value), 0o644)
			}
			if err != nil {
				if s.optional && errors.Is(err, fs.ErrNotExist) {
					continue
				}
				errs = append(errs, fmt.Errorf("felix: sysctl %s=%s: %w", strings.ReplaceAll(s.path, "/", "."), s.value, err))
				continue
			}
			changed++
		}
		return errors.Join(errs...)
	}
	if nsPath == "" {
		return changed, do()
	}
	err = ns.WithNetNSPath(nsPath, func(ns.NetNS) error { return do() })
	return changed, err
}
