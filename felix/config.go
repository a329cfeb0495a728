package felix

import (
	"errors"
	"fmt"
	"time"

	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy"
)

// Defaults for Config.
const (
	DefaultResyncInterval  = 90 * time.Second
	DefaultGracePeriod     = 10 * time.Second
	DefaultMTUFile         = "/var/lib/routed/mtu"
	DefaultHostMTU         = 1500
	TunnelDevice           = "tunl0"
	IPIPOverhead           = 20
	defaultMaxRetryBackoff = 30 * time.Second
)

// Config configures a Felix. The zero value of each optional field takes
// the default.
type Config struct {
	// NodeName is this node's name in the datastore (required).
	NodeName string
	// RouteProtocol marks programmed routes; default
	// kernel.RouteProtocol, the number the CNI plugin writes too.
	RouteProtocol uint8
	// ResyncInterval is how often the kernel is re-read in full.
	ResyncInterval time.Duration
	// RouteGracePeriod protects routes on pods' devices younger than
	// this (the CNI plugin's host route before felix hears of the pod);
	// felix's own devices have none.
	RouteGracePeriod time.Duration
	// NetNSPath is the network namespace to program; empty means the
	// namespace felix runs in.
	NetNSPath string
	// WorkloadInterfacePrefix names pod host-side devices; empty or
	// kernel.HostDevicePrefix, the only prefix the CNI plugin and the
	// API know.
	WorkloadInterfacePrefix string
	// HostMTU overrides MTU detection when non-zero.
	HostMTU int
	// MTUInterface, when set, is the device whose MTU is the host MTU;
	// otherwise it is the device holding the node address, or the
	// default route's device.
	MTUInterface string
	// MTUFile is where the pod MTU is written for the CNI plugin.
	MTUFile string
	// IPIPMTU, VXLANMTU and VXLANMTUV6 are the MTUs of tunl0,
	// vxlan.routed and vxlan-v6.routed, and of pods while the tunnel is
	// in use (FelixConfiguration's ipipMTU, vxlanMTU, vxlanMTUV6); 0
	// derives each from the host MTU. ApplySettings changes them while
	// felix runs.
	IPIPMTU, VXLANMTU, VXLANMTUV6 int
	// VXLANVNI and VXLANPort are the VNI and UDP port of both VXLAN
	// devices (FelixConfiguration's vxlanVNI, vxlanPort); 0 is
	// Calico's default, the package's VXLANVNI and VXLANPort. Every node
	// must use the same. ApplySettings changes them while felix runs
	// (the devices are recreated).
	VXLANVNI, VXLANPort int
	// Features turns parts of the dataplane off.
	Features Features
	// Log is the base logger; default logrus with component=felix.
	Log *logrus.Entry
	// PolicyLog configures the policy Log action and the optional log of
	// default drops (nflog group, rate).
	PolicyLog policy.LogConfig
	// Flows turns on flow records with PolicyLog.FlowGroup (docs/flows.md).
	Flows FlowsConfig
	// PolicyCounterPoll is how often the policy rule counters are read
	// to tell when each rule last matched (DefaultPolicyCounterPoll).
	PolicyCounterPoll time.Duration
	// FailsafeInboundHostPorts and FailsafeOutboundHostPorts are the
	// ports to and from this node that no host endpoint policy closes
	// (Calico's FelixConfiguration fields of the same names): nil is
	// Calico's defaults (policy.DefaultFailsafeInbound/Outbound), an
	// empty list none. Protocols TCP (6), UDP (17) or SCTP (132).
	FailsafeInboundHostPorts, FailsafeOutboundHostPorts []policy.HostPort
	// WireGuard encrypts pod traffic between nodes (wireguard.go); off
	// unless Enabled or EnabledV6.
	WireGuard WireguardConfig
	// Beat, when set, is marked each time the loop goes round (at least
	// every heartbeat.Interval): the daemon's liveness reads it.
	Beat *heartbeat.Beat
}

// Features are toggles for parts of the dataplane; all are on by default.
type Features struct {
	DisableIPIP        bool
	DisableNATOutgoing bool
	// DisablePolicy leaves network policy unenforced (no routed-policy
	// tables at all). For tests of other parts only: a node without
	// policy lets every pod reach every pod.
	DisablePolicy  bool
	DisableSysctls bool
	DisableMTUFile bool
}

func (c Config) withDefaults() (Config, error) {
	if c.NodeName == "" {
		return c, errors.New("felix: config: node name is required")
	}
	if c.RouteProtocol == 0 {
		c.RouteProtocol = kernel.RouteProtocol
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = DefaultResyncInterval
	}
	if c.RouteGracePeriod == 0 {
		c.RouteGracePeriod = DefaultGracePeriod
	}
	switch c.WorkloadInterfacePrefix {
	case "":
		c.WorkloadInterfacePrefix = kernel.HostDevicePrefix
	case kernel.HostDevicePrefix:
	default:
		return c, fmt.Errorf("felix: config: WorkloadInterfacePrefix %q: must be %q (or empty), the prefix the CNI plugin names pod devices with", c.WorkloadInterfacePrefix, kernel.HostDevicePrefix)
	}
	if c.PolicyCounterPoll <= 0 {
		c.PolicyCounterPoll = DefaultPolicyCounterPoll
	}
	if err := checkFailsafe(c.FailsafeInboundHostPorts, c.FailsafeOutboundHostPorts); err != nil {
		return c, err
	}
	if c.MTUFile == "" {
		c.MTUFile = DefaultMTUFile
	}
	var err error
	if c.WireGuard, err = c.WireGuard.withDefaults(); err != nil {
		return c, err
	}
	if c.Log == nil {
		c.Log = logrus.WithField("component", "felix")
	}
	return c, nil
}

// tunnelMTU is tunl0's MTU on a host of MTU host.
func (c *Config) tunnelMTU(host int) int {
	if c.IPIPMTU > 0 {
		return c.IPIPMTU
	}
	return host - IPIPOverhead
}

// vxlanVNI is the VNI of the VXLAN devices.
func (c *Config) vxlanVNI() int {
	if c.VXLANVNI > 0 {
		return c.VXLANVNI
	}
	return VXLANVNI
}

// vxlanPort is the UDP port of the VXLAN devices.
func (c *Config) vxlanPort() int {
	if c.VXLANPort > 0 {
		return c.VXLANPort
	}
	return VXLANPort
}

// vxlanMTU is the MTU of the VXLAN device of a family on a host of MTU
// host.
func (c *Config) vxlanMTU(host int, v6 bool) int {
	switch {
	case v6 && c.VXLANMTUV6 > 0:
		return c.VXLANMTUV6
	case v6:
		return host - VXLANOverheadV6
	case c.VXLANMTU > 0:
		return c.VXLANMTU
	}
	return host - VXLANOverhead
}
