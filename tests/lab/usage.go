package lab

import "path/filepath"

// CtlCommand is the command line (argv) that runs routedctl as node sees
// it, for a person at a shell on this machine: inside the node's network
// namespace (the lab's etcd listens in the lab's namespaces only), with
// the node's status socket and the lab's etcd endpoints (and client
// certificate, for an etcd cluster). routedctl's arguments follow it.
func (l *Lab) CtlCommand(node string) []string {
	argv := []string{"ip", "netns", "exec", node, "env", "ROUTED_STATUS_SOCKET=" + l.socket(node)}
	argv = append(argv, l.etcdClientEnv()...)
	return append(argv, l.Bins.Routedctl)
}

// BirdcCommand is the command line that asks the router's BIRD, or nil
// when the lab runs none. birdc's arguments follow it.
func (l *Lab) BirdcCommand() []string {
	if l.Topo.NoRouterBGP {
		return nil
	}
	return []string{"ip", "netns", "exec", l.Topo.RouterNS(), "birdc", "-s", l.birdSocket()}
}

// NodeLog is the path of node's routed log.
func (l *Lab) NodeLog(node string) string { return filepath.Join(l.Dir, node, "routed.log") }
