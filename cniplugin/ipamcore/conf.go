package ipamcore

// What routed-ipam's thin front ends need without a datastore (the
// configuration, its result format): nothing here may import
// pkg/datastore or pkg/ipam, so that the socket-only builds of the
// plugins (build tag cnithin, see cniplugin/README.md) stay cheap to start.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
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
	// IPv4Pools and IPv6Pools restrict allocation to these pools (names
	// or CIDRs), in order of preference.
	IPv4Pools []string `json:"ipv4_pools"`
	IPv6Pools []string `json:"ipv6_pools"`
	// AssignIPv4 and AssignIPv6 ("true" or "false", as calico-ipam) say
	// whether the pod gets an address of that family. Unset means: when
	// an enabled pool of the family selects the node (so a dual-stack
	// cluster's pods get both, a single-stack one's the one), or when
	// the family's pools are named in ipv4_pools/ipv6_pools.
	AssignIPv4 *string `json:"assign_ipv4"`
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
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for i, v := range []*string{nc.IPAM.AssignIPv4, nc.IPAM.AssignIPv6} {
		name := []string{"assign_ipv4", "assign_ipv6"}[i]
		if v != nil && *v != "true" && *v != "false" {
			return nil, fmt.Errorf("%w: %s is %q; want \"true\" or \"false\" (or leave it out: a family is assigned when a pool of it selects the node)", ErrConfig, name, *v)
		}
	}
	if off(nc.IPAM.AssignIPv4) && off(nc.IPAM.AssignIPv6) {
		return nil, fmt.Errorf("%w: assign_ipv4 and assign_ipv6 are both \"false\": the pod would get no address", ErrConfig)
	}
	if off(nc.IPAM.AssignIPv4) && len(nc.IPAM.IPv4Pools) > 0 {
		return nil, fmt.Errorf("%w: ipv4_pools is set but assign_ipv4 is \"false\"", ErrConfig)
	}
	if off(nc.IPAM.AssignIPv6) && len(nc.IPAM.IPv6Pools) > 0 {
		return nil, fmt.Errorf("%w: ipv6_pools is set but assign_ipv6 is \"false\"", ErrConfig)
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

func off(v *string) bool { return v != nil && *v == "false" }

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

// PrevResult reads the ADD result a CHECK carries. Errors wrap ErrConfig.
func PrevResult(nc *types.NetConf) (*current.Result, error) {
	if nc.RawPrevResult == nil {
		return nil, fmt.Errorf("%w: CHECK needs prevResult", ErrConfig)
	}
	if err := version.ParsePrevResult(nc); err != nil {
		return nil, fmt.Errorf("%w: prevResult: %w", ErrConfig, err)
	}
	prev, err := current.NewResultFromResult(nc.PrevResult)
	if err != nil {
		return nil, fmt.Errorf("%w: prevResult: %w", ErrConfig, err)
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
