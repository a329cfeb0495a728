package api_test

import (
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// kubectlCRDList is what `kubectl get ippools.crd.projectcalico.org,
// bgppeers.crd.projectcalico.org -o yaml` prints on a Calico cluster
// that uses the Kubernetes datastore: a core v1 List of custom
// resources with the API server's metadata.
const kubectlCRDList = `apiVersion: v1
items:
- apiVersion: crd.projectcalico.org/v1
  kind: IPPool
  metadata:
    annotations:
      projectcalico.org/metadata: '{"uid":"8b5c0b3a-5d6e-4b0e-9a0e-1d2c3b4a5f60","creationTimestamp":"2024-03-01T10:00:00Z"}'
    creationTimestamp: "2024-03-01T10:00:00Z"
    generation: 1
    name: default-ipv4-ippool
    resourceVersion: "1234"
    uid: 0f7c6f0e-3a4b-4c5d-8e9f-0a1b2c3d4e5f
  spec:
    allowedUses:
    - Workload
    - Tunnel
    blockSize: 26
    cidr: 192.168.0.0/16
    ipipMode: Always
    natOutgoing: true
    nodeSelector: all()
    vxlanMode: Never
- apiVersion: crd.projectcalico.org/v1
  kind: BGPPeer
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"crd.projectcalico.org/v1","kind":"BGPPeer","metadata":{"annotations":{},"name":"rack1-tor"},"spec":{"asNumber":64567,"nodeSelector":"rack == 'rack-1'","peerIP":"192.20.30.40"}}
    creationTimestamp: "2024-03-02T11:00:00Z"
    generation: 1
    name: rack1-tor
    resourceVersion: "2345"
    uid: 1a2b3c4d-0000-4000-8000-000000000001
  spec:
    asNumber: 64567
    nodeSelector: rack == 'rack-1'
    peerIP: 192.20.30.40
kind: List
metadata:
  resourceVersion: ""
`

// TestDecodeCalicoCRDForm: the crd.projectcalico.org/v1 form kubectl
// users hold was refused ("apiVersion not supported"); it is read like
// projectcalico.org/v3, inside kubectl's core v1 List, and the API
// server's bookkeeping is dropped.
func TestDecodeCalicoCRDForm(t *testing.T) {
	d, err := api.Decode([]byte(kubectlCRDList))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Resources) != 2 {
		t.Fatalf("got %d resources, want 2", len(d.Resources))
	}
	pool, ok := d.Resources[0].(*api.IPPool)
	if !ok || pool.Metadata.Name != "default-ipv4-ippool" || pool.Spec.CIDR != "192.168.0.0/16" || pool.Spec.IPIPMode != "Always" || !pool.Spec.NATOutgoing {
		t.Errorf("pool: %+v", d.Resources[0])
	}
	peer, ok := d.Resources[1].(*api.BGPPeer)
	if !ok || peer.Metadata.Name != "rack1-tor" || peer.Spec.PeerIP != "192.20.30.40" || peer.Spec.NodeSelector != "rack == 'rack-1'" {
		t.Errorf("peer: %+v", d.Resources[1])
	}
	for _, r := range d.Resources {
		if err := r.Validate(); err != nil {
			t.Errorf("%s %s: %v", r.GetKind(), r.Meta().Name, err)
		}
		if len(r.Meta().Annotations) != 0 || r.Meta().ResourceVersion != "" {
			t.Errorf("%s %s kept Kubernetes bookkeeping: %+v", r.GetKind(), r.Meta().Name, r.Meta())
		}
	}
	refs, err := api.DecodeRefs([]byte(kubectlCRDList))
	if err != nil || len(refs) != 2 || refs[1] != (api.Ref{Kind: api.KindBGPPeer, Name: "rack1-tor"}) {
		t.Errorf("refs %v, %v", refs, err)
	}
	// A core v1 object that is not a List stays refused, naming the forms.
	_, err = api.Decode([]byte("apiVersion: v1\nkind: IPPool\nmetadata: {name: x}\nspec: {cidr: 10.0.0.0/16}\n"))
	if err == nil || !strings.Contains(err.Error(), api.CalicoCRDAPIVersion) {
		t.Errorf("core v1 IPPool: %v", err)
	}
}

// kubectlPolicyCRDList is `kubectl get tiers.crd.projectcalico.org,
// networkpolicies.crd.projectcalico.org,globalnetworksets.crd.projectcalico.org
// -o yaml` on a Calico cluster with the Kubernetes datastore: tier status,
// policy names with their tier prefix, the API server's metadata.
const kubectlPolicyCRDList = `apiVersion: v1
items:
- apiVersion: crd.projectcalico.org/v1
  kind: Tier
  metadata:
    creationTimestamp: "2024-03-01T10:00:00Z"
    finalizers: [projectcalico.org/tier-controller]
    generation: 1
    name: security
    resourceVersion: "811"
    uid: 7c9d6a1e-1111-4000-8000-000000000001
  spec:
    defaultAction: Pass
    order: 300
  status:
    conditions:
    - {lastTransitionTime: "2024-03-01T10:00:01Z", message: "", reason: Ready, status: "True", type: Ready}
- apiVersion: crd.projectcalico.org/v1
  kind: NetworkPolicy
  metadata:
    annotations:
      projectcalico.org/metadata: '{"creationTimestamp":null}'
    creationTimestamp: "2024-03-01T10:05:00Z"
    generation: 1
    name: security.allow-dns
    namespace: shop
    resourceVersion: "812"
    uid: 7c9d6a1e-1111-4000-8000-000000000002
  spec:
    egress:
    - action: Allow
      destination:
        ports: [53]
        selector: k8s-app == 'kube-dns'
        namespaceSelector: projectcalico.org/name == 'kube-system'
      protocol: UDP
    order: 10
    selector: all()
    tier: security
    types: [Egress]
- apiVersion: crd.projectcalico.org/v1
  kind: GlobalNetworkSet
  metadata:
    creationTimestamp: "2024-03-01T10:06:00Z"
    generation: 1
    labels: {blocked: "true"}
    name: blocked
    resourceVersion: "813"
    uid: 7c9d6a1e-1111-4000-8000-000000000003
  spec:
    nets: [198.51.100.0/24]
kind: List
metadata:
  resourceVersion: ""
`

// TestDecodePolicyCRDForm: the policy model's kinds in kubectl's CRD
// form are read like their projectcalico.org/v3 form, the server's
// bookkeeping dropped, and delete -f names namespaced ones by store name.
func TestDecodePolicyCRDForm(t *testing.T) {
	t.Parallel()
	d := mustDecode(t, kubectlPolicyCRDList)
	if got := names(d.Resources); strings.Join(got, " ") != "Tier/security NetworkPolicy/security.allow-dns GlobalNetworkSet/blocked" {
		t.Fatalf("decoded %v", got)
	}
	for _, r := range d.Resources {
		if err := r.Validate(); err != nil {
			t.Errorf("%v", err)
		}
		if len(r.Meta().Annotations) != 0 || r.Meta().UID != "" {
			t.Errorf("%s kept Kubernetes bookkeeping: %+v", r.GetKind(), r.Meta())
		}
	}
	np := d.Resources[1].(*api.NetworkPolicy)
	if api.StoreName(np) != "shop.security.allow-dns" || np.Spec.Egress[0].Destination.Ports[0] != api.SinglePort(53) {
		t.Errorf("policy %s %+v", api.StoreName(np), np.Spec)
	}
	refs, err := api.DecodeRefs([]byte(kubectlPolicyCRDList))
	if err != nil || len(refs) != 3 || refs[1] != (api.Ref{Kind: api.KindNetworkPolicy, Name: "shop.security.allow-dns"}) {
		t.Errorf("refs %v, %v", refs, err)
	}
}
