package ctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestGetHostEndpointTable: `routedctl get hostendpoints` prints
// calicoctl's columns (it fell through to another kind's and panicked).
func TestGetHostEndpointTable(t *testing.T) {
	h := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: "node1-eth0"},
		Spec: api.HostEndpointSpec{Node: "node1", InterfaceName: "eth0", ExpectedIPs: []string{"10.0.0.1"}, Profiles: []string{"p"}}}
	for wide, want := range map[bool][]string{false: {"NAME", "NODE", "node1-eth0", "node1"}, true: {"INTERFACE", "IPS", "PROFILES", "eth0", "10.0.0.1"}} {
		var b bytes.Buffer
		if err := printTable(&b, api.KindHostEndpoint, []api.Resource{h}, wide); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("wide=%v: no %q in\n%s", wide, w, b.String())
			}
		}
	}
}
