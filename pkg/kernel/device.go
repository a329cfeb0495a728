package kernel

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
)

// HostDevicePrefix starts the name of every pod's host-side device
// (Calico's "cali"); felix routes endpoint addresses only to such devices.
const HostDevicePrefix = "cali"

// MaxDeviceNameLen is the longest Linux interface name: IFNAMSIZ (16)
// less the terminating NUL.
const MaxDeviceNameLen = 15

// HostDeviceName is the host-side device name of a pod: HostDevicePrefix
// and the first 11 hex digits of sha1("<namespace>.<pod>"), or of
// sha1(containerID) for a workload outside Kubernetes. That is 15
// characters, the kernel's limit, and the name Calico computes, so its
// tooling recognises the devices and a migrated pod keeps its device.
func HostDeviceName(namespace, pod, containerID string) string {
	key := containerID
	if pod != "" {
		key = namespace + "." + pod
	}
	sum := sha1.Sum([]byte(key))
	return HostDevicePrefix + hex.EncodeToString(sum[:])[:MaxDeviceNameLen-len(HostDevicePrefix)]
}

// CheckHostDeviceName returns nil when name may be a pod's host-side
// device: HostDevicePrefix followed by 1 to 11 printable ASCII characters
// other than '/', ':' and '%'. The kernel refuses '/', ':' and white space
// (dev_valid_name) and reads '%' as a template ("cali%d" would become
// some other name); this rule is stricter, refusing control and
// non-ASCII bytes too, and still accepts every name HostDeviceName
// produces. An endpoint naming another device (eth0, lo) must not steer
// pod addresses to the host's own interfaces.
func CheckHostDeviceName(name string) error {
	rest, ok := strings.CutPrefix(name, HostDevicePrefix)
	switch {
	case !ok:
		return fmt.Errorf("%q does not start with %q", name, HostDevicePrefix)
	case rest == "":
		return fmt.Errorf("%q has nothing after %q", name, HostDevicePrefix)
	case len(name) > MaxDeviceNameLen:
		return fmt.Errorf("%q is longer than the kernel's %d characters", name, MaxDeviceNameLen)
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c >= 0x7f || c == '/' || c == ':' || c == '%' {
			return fmt.Errorf("%q holds %q: a device name takes printable ASCII other than '/', ':' and '%%'", name, c)
		}
	}
	return nil
}

// IsHostDeviceName reports whether CheckHostDeviceName accepts name.
func IsHostDeviceName(name string) bool { return CheckHostDeviceName(name) == nil }
