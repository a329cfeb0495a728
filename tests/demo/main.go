// Command demo runs routed's multi-node lab on this machine: four nodes on
// two subnets joined by a router, one route reflector, pods on every node
// through the real CNI plugin, then a ping between every pair of pods.
// It prints PASS or FAIL and always tears the lab down (also on Ctrl-C).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/routed-net/routed/tests/lab"
)

func main() {
	bin := flag.String("bin", "bin", "directory with routed, routedctl, routed-cni, routed-ipam")
	dir := flag.String("dir", "/tmp/routed-demo", "lab state: logs, sockets, CNI config")
	podsPerNode := flag.Int("pods", 2, "pods per node")
	keep := flag.Bool("keep", false, "leave the lab running after the checks and print how to use it: the etcd endpoint, the namespaces and routedctl command lines (tear down with Ctrl-C)")
	dualStack := flag.Bool("dual-stack", false, "give the nodes IPv6 subnets and addresses, add an IPv6 pool and IPv6 BGP sessions: every pod gets both families and every pair is pinged over both")
	encap := flag.String("encap", "auto", "pod traffic between subnets: auto (IPIP CrossSubnet when the kernel has ipip, else routed through the router), ipip, none, or vxlan (VXLAN CrossSubnet with no BGP at all)")
	etcdMembers := flag.Int("etcd-members", 1, "etcd members: 1 (one plain etcd in the router) or 3 (a cluster, each member in its own namespace, mTLS on client and peer ports, every client given all three endpoints)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "make demo needs root: it creates network namespaces, routes and BGP sessions. Run: sudo make demo")
		os.Exit(2)
	}
	os.Exit(run(*bin, *dir, *podsPerNode, *keep, *encap, *dualStack, *etcdMembers))
}

func run(bin, dir string, podsPerNode int, keep bool, encap string, dualStack bool, etcdMembers int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs, _ := filepath.Abs(bin)
	cnitool, err := exec.LookPath("cnitool")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		cnitool = filepath.Join(string(trim(gopath)), "bin", "cnitool")
	}
	bins := lab.Binaries{
		Routed: filepath.Join(abs, "routed"), Routedctl: filepath.Join(abs, "routedctl"),
		RoutedCNI: filepath.Join(abs, "routed-cni"), RoutedIPAM: filepath.Join(abs, "routed-ipam"),
		Cnitool: cnitool,
	}
	topo := lab.DefaultTopology("rdemo", 0)
	switch encap {
	case "auto":
		if lab.KernelHasIPIP() {
			topo.IPIPMode = "CrossSubnet"
		}
	case "ipip":
		topo.IPIPMode = "CrossSubnet"
	case "none":
	case "vxlan":
		// Routes come from the datastore alone: no BIRD, no BGP sessions.
		topo.VXLANMode, topo.NoRouterBGP, topo.NoNodeBGP = "CrossSubnet", true, true
	default:
		fmt.Fprintf(os.Stderr, "-encap %q: want auto, ipip, none or vxlan\n", encap)
		return 2
	}
	if dualStack {
		if topo.NoRouterBGP {
			fmt.Fprintln(os.Stderr, "-dual-stack needs BGP (IPv6 pools are routed natively, without VXLAN): use -encap auto, ipip or none")
			return 2
		}
		topo = topo.WithDualStack()
	}
	topo.EtcdMembers = etcdMembers
	l := lab.New(topo, bins, dir, func(f string, a ...any) { fmt.Printf("==> "+f+"\n", a...) })
	// Tear down on every path out, with a fresh context: ctx may be cancelled.
	defer func() {
		fmt.Println("==> tearing the lab down")
		l.Down(context.Background())
	}()
	fmt.Printf("==> IPIP mode %s, VXLAN mode %s (kernel ipip support: %v), dual-stack %v, etcd members %d\n", topo.IPIPMode, topo.VXLANMode, lab.KernelHasIPIP(), dualStack, etcdMembers)
	if err := l.Up(ctx); err != nil {
		fmt.Printf("FAIL: bringing the lab up: %v\n(logs in %s)\n", err, dir)
		return 1
	}
	report := lab.Check(ctx, l, podsPerNode, os.Stdout)
	if keep {
		printUsage(os.Stdout, l, l.Pods())
		<-ctx.Done()
	}
	if !report.OK() {
		fmt.Printf("\nFAIL: %s (logs in %s)\n", report, dir)
		return 1
	}
	fmt.Printf("\nPASS: %s\n", report)
	return 0
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
