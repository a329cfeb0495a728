package lab

import (
	"context"
	"fmt"
)

// UpForMigration brings up a lab that runs no routed yet: the network,
// the (empty) etcd and each node's routed CNI configuration for pods
// added once the node runs routed, with IPv4 forwarding on every node
// as calico-node turns it on. No configuration is applied and neither
// the router's BIRD nor any routed starts: the cluster runs something
// else first (Calico, switched to routed node by node with StartNode).
// Down removes it as it removes any lab.
func (l *Lab) UpForMigration(ctx context.Context) error {
	if err := l.Topo.validateEtcdMembers(); err != nil {
		return err
	}
	Cleanup(ctx, l.Topo.Prefix, l.Dir)
	for _, step := range []func(context.Context) error{l.buildNetwork, l.startEtcd, l.writeCNIConfig, l.forwardOnNodes} {
		if err := step(ctx); err != nil {
			return fmt.Errorf("lab up for migration: %w", err)
		}
	}
	return nil
}

// forwardOnNodes turns IPv4 forwarding on in every node namespace.
func (l *Lab) forwardOnNodes(ctx context.Context) error {
	for _, n := range l.Topo.Nodes {
		if _, err := nsRun(ctx, n.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			return err
		}
	}
	return nil
}

// NodeNetNSPath is the path of a node's network namespace (for nsenter
// and CNI_NETNS-style consumers).
func NodeNetNSPath(node string) string { return "/var/run/netns/" + node }
