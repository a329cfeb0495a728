package api_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestLabelScalarsReadAsCalicoReadsThem: unquoted label and annotation
// values (`routeReflector: true`, `global-peer: yes`, `rack: 1`) were
// refused with "field metadata.labels: expected string, got bool".
// calicoctl decodes YAML into typed string maps, so a scalar becomes its
// string form (YAML 1.1: yes/on are true); routed reads them the same,
// also in List items and JSON.
func TestLabelScalarsReadAsCalicoReadsThem(t *testing.T) {
	want := map[string]string{"routeReflector": "true", "global-peer": "true", "rack": "1", "weight": "1.5", "name": "plain"}
	wantAnn := map[string]string{"routed.io/ready": "false", "count": "3"}
	for _, tc := range []struct{ name, in string }{
		{"calico node", `apiVersion: projectcalico.org/v3
kind: Node
metadata:
  name: rr1
  labels: {routeReflector: true, global-peer: yes, rack: 1, weight: 1.5, name: plain}
  annotations: {routed.io/ready: false, count: 3}
spec:
  bgp:
    ipv4Address: 10.0.0.1/24
    routeReflectorClusterID: 224.0.0.1
`},
		{"list item", `apiVersion: projectcalico.org/v3
kind: NodeList
items:
- metadata:
    name: rr1
    labels: {routeReflector: true, global-peer: yes, rack: 1, weight: 1.5, name: plain}
    annotations: {routed.io/ready: false, count: 3}
  spec:
    bgp: {ipv4Address: 10.0.0.1/24}
`},
		{"json", `{"apiVersion": "routed.io/v1", "kind": "Node", "metadata": {"name": "rr1",
  "labels": {"routeReflector": true, "global-peer": true, "rack": 1, "weight": 1.5, "name": "plain"},
  "annotations": {"routed.io/ready": false, "count": 3}},
  "spec": {"bgp": {"ipv4Address": "10.0.0.1/24"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := api.Decode([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			n := d.Resources[0].(*api.Node)
			if !maps.Equal(n.Metadata.Labels, want) {
				t.Errorf("labels %v, want %v", n.Metadata.Labels, want)
			}
			if !maps.Equal(n.Metadata.Annotations, wantAnn) {
				t.Errorf("annotations %v, want %v", n.Metadata.Annotations, wantAnn)
			}
		})
	}
	// A value that is no scalar stays an error naming the field.
	_, err := api.Decode([]byte("apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: a, labels: {a: [1, 2]}}\n"))
	if !errors.Is(err, api.ErrDecode) {
		t.Fatalf("list as a label value: %v", err)
	}
	t.Logf("list as a label value: %v", err)
}
