package netconf

import (
	"fmt"
	"path/filepath"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/cniapi"
)

// SocketOff in routed_socket turns asking routed off.
const SocketOff = "none"

// Socket is routed's CNI socket for this configuration.
func (c *NetConf) Socket() string {
	if c.RoutedSocket == "" {
		return cniapi.DefaultSocket
	}
	return c.RoutedSocket
}

// checkRoutedSocket validates routed_socket.
func (c *NetConf) checkRoutedSocket() error {
	if s := c.RoutedSocket; s != "" && s != SocketOff && !filepath.IsAbs(s) {
		return fmt.Errorf("%w: routed_socket %q must be an absolute path (or %q: never ask routed)", ErrConfig, s, SocketOff)
	}
	return nil
}

// RoutedRequest builds the request routed-cni and routed-ipam send to
// routed for this invocation, identifying the host IPAM lock file (which
// it creates if missing) so that routed locks the same one.
func (c *NetConf) RoutedRequest(k8s K8sArgs, node, containerID string, stdin []byte) (*cniapi.Request, error) {
	ic, err := ipamcore.ParseConf(stdin)
	if err != nil {
		return nil, ipamcore.CNIError(err)
	}
	dev, ino, err := ipamcore.LockFileID(ic.LockFile)
	if err != nil {
		return nil, ipamcore.CNIError(err)
	}
	return &cniapi.Request{
		Stdin: stdin, Network: c.Name, ContainerID: containerID, Node: node,
		Namespace: k8s.Namespace, Pod: k8s.Pod, RuntimeIPs: c.RuntimeConfig.IPs, ArgsIPs: k8s.RequestedIP,
		LockDev: dev, LockIno: ino,
	}, nil
}
