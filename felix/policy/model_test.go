package policy

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func TestEndpointFromAPI(t *testing.T) {
	w := &api.WorkloadEndpoint{
		Metadata: api.ObjectMeta{Name: "node1-k8s-prod-web--0-eth0", Labels: map[string]string{"app": "web"}},
		Spec: api.WorkloadEndpointSpec{
			Node: "node1", Orchestrator: "k8s", Namespace: "prod", Pod: "web-0", InterfaceName: "cali0123456789a",
			IPNetworks: []string{"10.0.0.5/32", "fd00::5/128"}, ServiceAccountName: "default",
			Profiles: []string{"kns.prod", "ksa.prod.default"},
			Ports:    []api.WorkloadEndpointPort{{Name: "http", Protocol: api.ProtocolFromName("TCP"), Port: 8080}},
		},
	}
	ep, err := EndpointFromAPI(w, true)
	if err != nil {
		t.Fatal(err)
	}
	want := Endpoint{Key: w.Metadata.Name, Iface: "cali0123456789a", Local: true, Namespace: "prod", ServiceAccount: "default",
		Profiles: w.Spec.Profiles, IPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32"), netip.MustParsePrefix("fd00::5/128")},
		Ports: []NamedPort{{Name: "http", Proto: 6, Port: 8080}}}
	if ep.Key != want.Key || ep.Iface != want.Iface || ep.Namespace != want.Namespace || ep.ServiceAccount != want.ServiceAccount ||
		!slices.Equal(ep.Profiles, want.Profiles) || !slices.Equal(ep.IPs, want.IPs) || !slices.Equal(ep.Ports, want.Ports) {
		t.Errorf("got %+v\nwant %+v", ep, want)
	}
	if ep.Labels["app"] != "web" || ep.Labels[api.LabelOrchestrator] != "k8s" || w.Metadata.Labels[api.LabelOrchestrator] != "" {
		t.Errorf("labels %v (the WorkloadEndpoint's own must stay untouched: %v)", ep.Labels, w.Metadata.Labels)
	}
	w.Spec.IPNetworks = []string{"10.0.0.5"}
	if _, err := EndpointFromAPI(w, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad ipNetworks: %v, want ErrInvalid", err)
	}
}
