package netconf

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSocketOnlyIPAMStaysLight: the socket-only routed-ipam, exec'd once
// per pod start, links none of the packages whose initialisation and
// pages made up a third of its cost (cniplugin/README.md).
func TestSocketOnlyIPAMStaysLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "cnithin", "-deps", "github.com/routed-net/routed/cniplugin/cmd/routed-ipam").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"net/http", "crypto/tls", "go.opentelemetry.io/", "github.com/routed-net/routed/pkg/api",
		"github.com/routed-net/routed/cniplugin/plugin", "github.com/containernetworking/cni/pkg/invoke",
		"github.com/vishvananda/netlink", "github.com/google/nftables", "go.etcd.io/", "google.golang.org/grpc"}
	for _, p := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if p == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(p, f)) {
				t.Errorf("the socket-only routed-ipam links %s", p)
			}
		}
	}
}
