package felix

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
)

// sysctl is one /proc/sys setting; path is relative to /proc/sys.
type sysctl struct {
	path, value string
	// optional settings belong to a device that may vanish meanwhile.
	optional bool
}

func globalSysctls() []sysctl {
	return []sysctl{{path: "net/ipv4/ip_forward", value: "1"}}
}

// workloadSysctls are what a pod's host-side device needs: answer ARP for
// every address (the pod's gateway 169.254.1.1 exists nowhere) at once,
// and forward.
func workloadSysctls(iface string) []sysctl {
	return []sysctl{
		{path: "net/ipv4/conf/" + iface + "/proxy_arp", value: "1", optional: true},
		{path: "net/ipv4/neigh/" + iface + "/proxy_delay", value: "0", optional: true},
		{path: "net/ipv4/conf/" + iface + "/forwarding", value: "1", optional: true},
	}
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
