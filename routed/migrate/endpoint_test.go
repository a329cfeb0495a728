package migrate

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestCalicoEndpointKeepsIdentity: a migrated endpoint keeps what policy
// selects it by (labels, profiles, service account, named ports), with
// port protocols in Calico's spelling whatever case older Calico wrote.
func TestCalicoEndpointKeepsIdentity(t *testing.T) {
	data := `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3",
	 "metadata":{"name":"node--a-k8s-web-eth0","namespace":"shop","labels":{"app":"web","projectcalico.org/namespace":"shop","projectcalico.org/serviceaccount":"frontend"}},
	 "spec":{"orchestrator":"k8s","node":"node-a","containerID":"c1","pod":"web","endpoint":"eth0","interfaceName":"cali1234567890a",
	  "ipNetworks":["10.246.1.1/32"],"profiles":["kns.shop","ksa.shop.frontend"],"serviceAccountName":"frontend",
	  "ports":[{"name":"http","protocol":"tcp","port":8080,"hostPort":0},{"name":"dns","protocol":"UDP","port":53}]}}`
	w, err := calicoEndpoint([]byte(data), map[netip.Addr]string{netip.MustParseAddr("10.246.1.1"): "k8s-pod-network.c1"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.Spec.Profiles, []string{"kns.shop", "ksa.shop.frontend"}) || w.Spec.ServiceAccountName != "frontend" || w.Metadata.Labels["app"] != "web" {
		t.Errorf("identity lost: %+v %v", w.Spec, w.Metadata.Labels)
	}
	want := []api.WorkloadEndpointPort{{Name: "http", Protocol: api.ProtocolFromName("TCP"), Port: 8080}, {Name: "dns", Protocol: api.ProtocolFromName("UDP"), Port: 53}}
	if !reflect.DeepEqual(w.Spec.Ports, want) {
		t.Errorf("ports %+v, want %+v", w.Spec.Ports, want)
	}
}

// TestDecodeCalicoSkipsStatus: a stored resource's status (an IPPool's
// conditions) is not read, so the pool still carries.
func TestDecodeCalicoSkipsStatus(t *testing.T) {
	r, _, err := decodeCalico(api.KindIPPool, kv{Key: []byte(calicoResources + "ippools/p"), Value: []byte(`{"kind":"IPPool","apiVersion":"projectcalico.org/v3",
	 "metadata":{"name":"p"},"spec":{"cidr":"10.9.0.0/16","blockSize":26,"nodeSelector":"all()"},
	 "status":{"conditions":[{"type":"Allocatable","status":"True"}]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if p := r.(*api.IPPool); p.Spec.CIDR != "10.9.0.0/16" {
		t.Errorf("pool %+v", p.Spec)
	}
}
