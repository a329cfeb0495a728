package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/tests/lab"
	"github.com/routed-net/routed/tests/testbin"
)

// TestKeepPrintsWorkingCommands brings a lab up as the demo does, prints
// what -keep prints, and runs every printed command line through sh as a
// person would paste it: routedctl in a node's namespace against the
// lab's etcd and the node's socket, a pod's ping, the kernel's routes,
// BIRD. Each must succeed and show what it says it shows.
func TestKeepPrintsWorkingCommands(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	cnitool, err := exec.LookPath("cnitool")
	if err != nil {
		t.Fatalf("cnitool not found; run tests/ensure-deps.sh (make deps): %v", err)
	}
	bins := lab.Binaries{
		Routed: testbin.Path(t, "routed"), Routedctl: testbin.Path(t, "routedctl"),
		RoutedCNI: testbin.Path(t, "routed-cni"), RoutedIPAM: testbin.Path(t, "routed-ipam"),
		Cnitool: cnitool,
	}
	idx := lab.ClaimIndex(t)
	topo := lab.DefaultTopology(fmt.Sprintf("rk%d", idx), idx)
	l := lab.New(topo, bins, t.TempDir(), t.Logf)
	t.Cleanup(func() { l.Down(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := l.Up(ctx); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	first, last := topo.Nodes[1].Name, topo.Nodes[len(topo.Nodes)-1].Name
	for _, p := range [][2]string{{first, "pod21"}, {last, "pod41"}} {
		if _, err := l.AddPod(ctx, p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	var printed bytes.Buffer
	printUsage(&printed, l, l.Pods())
	text := printed.String()
	t.Logf("printed:\n%s", text)
	for _, want := range []string{topo.EtcdEndpoint(), topo.RouterNS(), l.NodeLog("<node>"), "default/pod21 on " + first} {
		if !strings.Contains(text, want) {
			t.Errorf("the usage does not name %q", want)
		}
	}

	// What each printed line (by how it ends) must show once it succeeds.
	shows := []struct{ suffix, want string }{
		{" node status", "Established"},
		{" get nodes -o wide", last},
		{" get workloadendpoints", "default/pod41"},
		{" get workloadendpoint default/pod21 -o yaml", "name: " + api.WorkloadEndpointName(first, "k8s", "default", "pod21", "", "eth0")},
		{"routedctl show route", "10."},
		{" ipam show --show-blocks", last},
		{" ip route show proto 82", "blackhole"}, // this node's own block
		{" ping -c 3 ", " 0% packet loss"},
		{" show route", "10."}, // BIRD's
	}
	ran := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "ip netns exec ") {
			continue
		}
		ran++
		want := ""
		for _, sh := range shows {
			if strings.HasSuffix(line, sh.suffix) || (strings.HasSuffix(sh.suffix, " ") && strings.Contains(line, sh.suffix)) {
				want = sh.want
				break
			}
		}
		if want == "" {
			t.Errorf("printed a command this test does not know how to check: %s", line)
			continue
		}
		// BGP sessions and pings come up within seconds of the lab.
		testenv.Eventually(t, 60*time.Second, 500*time.Millisecond, func() string {
			out, err := exec.CommandContext(ctx, "sh", "-c", line).CombinedOutput()
			if err != nil {
				return fmt.Sprintf("%s: %v\n%s", line, err, out)
			}
			if !strings.Contains(string(out), want) {
				return fmt.Sprintf("%s: output does not show %q:\n%s", line, want, out)
			}
			return ""
		})
	}
	if ran < 9 {
		t.Errorf("ran %d printed command lines, want at least 9 (routedctl x6, routes, ping, BIRD)", ran)
	}
}
