//go:build !cnithin

package netconf

import "github.com/routed-net/routed/cniplugin/ipamcore"

// Assignment is what routed-ipam assigns for one invocation when the
// plugin does it itself: the network and container, the node, the pod
// from CNI_ARGS and the fixed addresses asked for (runtimeConfig.ips,
// else CNI_ARGS IP=), as RoutedRequest tells routed. routed-cni's
// in-process IPAM and the routed-ipam executable both build it here.
func (c *NetConf) Assignment(k8s K8sArgs, node, containerID string) ipamcore.Assignment {
	return ipamcore.Assignment{
		Network:     c.Name,
		ContainerID: containerID,
		Node:        node,
		Namespace:   k8s.Namespace,
		Pod:         k8s.Pod,
		RuntimeIPs:  c.RuntimeConfig.IPs,
		ArgsIPs:     k8s.RequestedIP,
	}
}
