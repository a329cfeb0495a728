package ctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestGetServiceEndpointsTable: `routedctl get serviceendpoints` prints
// the Service, its endpoint count and ports (wide: the addresses)
// instead of falling through to another kind's columns.
func TestGetServiceEndpointsTable(t *testing.T) {
	s := &api.ServiceEndpoints{Metadata: api.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: api.ServiceEndpointsSpec{Subsets: []api.ServiceSubset{
			{Addresses: []string{"10.0.0.1", "10.0.0.2"}, Ports: []api.ServicePort{{Name: "http", Protocol: api.Protocol{Name: "TCP"}, Port: 8080}}},
			{Addresses: []string{"fd00::1"}, Ports: []api.ServicePort{{Protocol: api.Protocol{Name: "TCP"}, Port: 8080}, {Protocol: api.Protocol{Name: "UDP"}, Port: 53}}},
		}}}
	for wide, want := range map[bool][]string{false: {"NAMESPACE", "ENDPOINTS", "PORTS", "shop", "web", " 3 ", "TCP/8080,UDP/53"}, true: {"ADDRESSES", "10.0.0.1,10.0.0.2,fd00::1"}} {
		var b bytes.Buffer
		if err := printTable(&b, api.KindServiceEndpoints, []api.Resource{s}, wide); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("wide=%v: no %q in\n%s", wide, w, b.String())
			}
		}
	}
}
