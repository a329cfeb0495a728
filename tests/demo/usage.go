package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/routed-net/routed/tests/lab"
)

// usageCommand is one command printed for the person at the keyboard.
type usageCommand struct {
	what string
	argv []string
}

// usageCommands are the commands that show the running lab: routedctl as
// the last node sees it, a pod pinging another, the kernel's routes and
// the router's BIRD. Each argv runs as is from a root shell on this
// machine.
func usageCommands(l *lab.Lab, pods []lab.Pod) []usageCommand {
	node := l.Topo.Nodes[len(l.Topo.Nodes)-1].Name
	ctl := func(args ...string) []string { return append(l.CtlCommand(node), args...) }
	cmds := []usageCommand{
		{"BGP sessions of " + node, ctl("node", "status")},
		{"nodes with their addresses and tunnels", ctl("get", "nodes", "-o", "wide")},
		{"every pod interface, named NAMESPACE/POD", ctl("get", "workloadendpoints")},
	}
	if len(pods) > 0 {
		cmds = append(cmds, usageCommand{"one of them in full", ctl("get", "workloadendpoint", "default/"+pods[0].Name, "-o", "yaml")})
	}
	cmds = append(cmds,
		usageCommand{"routes BGP learned and felix programmed on " + node, ctl("show", "route")},
		usageCommand{"IPAM blocks and their nodes", ctl("ipam", "show", "--show-blocks")},
		usageCommand{"routed's kernel routes on " + node + " (route protocol 82)", []string{"ip", "netns", "exec", node, "ip", "route", "show", "proto", "82"}},
	)
	if len(pods) > 1 {
		from, to := pods[0], pods[len(pods)-1]
		cmds = append(cmds, usageCommand{fmt.Sprintf("pod %s (on %s) pings pod %s (on %s)", from.Name, from.Node, to.Name, to.Node),
			[]string{"ip", "netns", "exec", from.NS, "ping", "-c", "3", to.IP}})
	}
	if b := l.BirdcCommand(); b != nil {
		cmds = append(cmds, usageCommand{"the routes the router's BIRD learned", append(b, "show", "route")})
	}
	return cmds
}

// printUsage tells the person who ran -keep how to reach the lab: where
// etcd is, which namespace is which, where the logs are, and the
// commands above, ready to paste into another terminal.
func printUsage(w io.Writer, l *lab.Lab, pods []lab.Pod) {
	t := l.Topo
	fmt.Fprintf(w, "\n==> the lab is up; use it from another terminal, as root:\n\n")
	fmt.Fprintf(w, "etcd:    %s (reachable from the lab's namespaces only: run routedctl in one of them, e.g. %s)\n", t.EtcdEndpoint(), t.RouterNS())
	var nodes []string
	for _, n := range t.Nodes {
		s := fmt.Sprintf("%s %s", t.NodeNS(n), n.Addr.Addr())
		if n.RR {
			s += " (route reflector)"
		}
		nodes = append(nodes, s)
	}
	fmt.Fprintf(w, "nodes:   %s (network namespaces named after the nodes)\n", strings.Join(nodes, ", "))
	for _, p := range pods {
		fmt.Fprintf(w, "pod:     default/%s on %s, %s, netns %s\n", p.Name, p.Node, strings.TrimSuffix(p.IP+" "+p.IP6, " "), p.NS)
	}
	fmt.Fprintf(w, "logs:    %s (per node), %s/etcd.log\n", l.NodeLog("<node>"), l.Dir)
	fmt.Fprintf(w, "routedctl on another node: replace %s in the namespace and the socket path.\n", t.Nodes[len(t.Nodes)-1].Name)
	for _, c := range usageCommands(l, pods) {
		fmt.Fprintf(w, "\n# %s\n%s\n", c.what, shellLine(c.argv))
	}
	fmt.Fprintln(w, "\n==> press Ctrl-C here to tear the lab down")
}

// shellLine quotes argv for a POSIX shell: words of safe characters as
// they are, anything else in single quotes.
func shellLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@%+") == "" {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
