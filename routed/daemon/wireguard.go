package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/routed/status"
)

// WireguardConfig is routed's WireGuard configuration (felix's
// WireguardConfig, from flags and environment).
type WireguardConfig struct {
	Enabled, EnabledV6 bool
	AllowClear         bool
	HostEncryption     bool
	Port, PortV6       int
	MTU, MTUV6         int
	Mode               string
}

// bindWireguardFlags registers the WireGuard flags, with defaults from
// the environment (routed's names first, then Calico's FELIX_ ones).
func (c *Config) bindWireguardFlags(fs *pflag.FlagSet) {
	w := &c.Wireguard
	fs.BoolVar(&w.Enabled, "wireguard", c.envBool(false, "ROUTED_WIREGUARD", "FELIX_WIREGUARDENABLED"), "encrypt IPv4 pod traffic between nodes with WireGuard (device "+wireguard.DeviceV4+") (env ROUTED_WIREGUARD, FELIX_WIREGUARDENABLED)")
	fs.BoolVar(&w.EnabledV6, "wireguard-v6", c.envBool(false, "ROUTED_WIREGUARD_V6", "FELIX_WIREGUARDENABLEDV6"), "encrypt IPv6 pod traffic between nodes with WireGuard (device "+wireguard.DeviceV6+") (env ROUTED_WIREGUARD_V6, FELIX_WIREGUARDENABLEDV6)")
	fs.BoolVar(&w.AllowClear, "wireguard-allow-clear", c.envBool(false, "ROUTED_WIREGUARD_ALLOW_CLEAR"), "send pod traffic to a node that has published no WireGuard key in clear text; default false: it is held (dropped) until the key appears (env ROUTED_WIREGUARD_ALLOW_CLEAR)")
	fs.BoolVar(&w.HostEncryption, "wireguard-host-encryption", c.envBool(false, "ROUTED_WIREGUARD_HOST_ENCRYPTION", "FELIX_WIREGUARDHOSTENCRYPTIONENABLED"), "encrypt traffic between nodes' host addresses too, to every node with a WireGuard key once a handshake with it succeeded (others in clear, never held) (env ROUTED_WIREGUARD_HOST_ENCRYPTION, FELIX_WIREGUARDHOSTENCRYPTIONENABLED)")
	fs.IntVar(&w.Port, "wireguard-port", c.envInt(wireguard.PortV4, "ROUTED_WIREGUARD_PORT", "FELIX_WIREGUARDLISTENINGPORT"), "UDP port of the IPv4 WireGuard device, the same on every node (env ROUTED_WIREGUARD_PORT, FELIX_WIREGUARDLISTENINGPORT)")
	fs.IntVar(&w.PortV6, "wireguard-port-v6", c.envInt(wireguard.PortV6, "ROUTED_WIREGUARD_PORT_V6", "FELIX_WIREGUARDLISTENINGPORTV6"), "UDP port of the IPv6 WireGuard device (env ROUTED_WIREGUARD_PORT_V6, FELIX_WIREGUARDLISTENINGPORTV6)")
	fs.IntVar(&w.MTU, "wireguard-mtu", c.envInt(0, "ROUTED_WIREGUARD_MTU", "FELIX_WIREGUARDMTU"), "MTU of the IPv4 WireGuard device (0: host MTU less 60); pods get the smallest MTU in use (env ROUTED_WIREGUARD_MTU, FELIX_WIREGUARDMTU)")
	fs.IntVar(&w.MTUV6, "wireguard-mtu-v6", c.envInt(0, "ROUTED_WIREGUARD_MTU_V6", "FELIX_WIREGUARDMTUV6"), "MTU of the IPv6 WireGuard device (0: host MTU less 80) (env ROUTED_WIREGUARD_MTU_V6, FELIX_WIREGUARDMTUV6)")
	fs.StringVar(&w.Mode, "wireguard-mode", env(wireguard.ModeAuto, "ROUTED_WIREGUARD_MODE"), "auto (the kernel's WireGuard where the module is there, else wireguard-go in routed), kernel (or fail) or userspace (env ROUTED_WIREGUARD_MODE)")
}

// felixWireguard is felix's WireGuard configuration: keys in the state
// dir, published on the Node through publish.
func (c *Config) felixWireguard(publish func(v4, v6 string)) felix.WireguardConfig {
	w := c.Wireguard
	return felix.WireguardConfig{Enabled: w.Enabled, EnabledV6: w.EnabledV6, AllowClear: w.AllowClear,
		HostEncryption: w.HostEncryption, Port: w.Port, PortV6: w.PortV6, MTU: w.MTU, MTUV6: w.MTUV6,
		Mode: w.Mode, KeyDir: c.StateDir, PublishKeys: publish}
}

// wireguardStatus answers the status socket from felix.
func (n *node) wireguardStatus(ctx context.Context) (*status.Wireguard, error) {
	st, err := n.felix.Wireguard(ctx)
	if err != nil {
		return nil, err
	}
	// The two types are the same JSON: status does not import felix
	// (routedctl would carry wireguard-go).
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("wireguard status: %w", err)
	}
	out := &status.Wireguard{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("wireguard status: %w", err)
	}
	return out, nil
}

func (n *node) rotateWireguard(ctx context.Context) ([2]string, error) {
	return n.felix.RotateWireguardKeys(ctx)
}
