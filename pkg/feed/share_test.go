package feed

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestSnapshotSharesEndpointStrings: the endpoints of one snapshot hold
// one copy of the strings they repeat (label keys and values, node,
// profiles, port names), each its own label map (a consumer that changes
// one endpoint's labels changes no other), and their own names.
func TestSnapshotSharesEndpointStrings(t *testing.T) {
	var items []item
	for i := range 3 {
		name := fmt.Sprintf("node--1-k8s-pod%d-eth0", i)
		val := fmt.Sprintf(`{"apiVersion":"routed.io/v1","kind":"WorkloadEndpoint","metadata":{"name":%q,`+
			`"labels":{"app":"web","projectcalico.org/namespace":"ns-1"}},"spec":{"node":"node-1","orchestrator":"k8s",`+
			`"pod":"pod%d","containerID":"c%d","endpoint":"eth0","interfaceName":"cali%d","ipNetworks":["10.0.0.%d/32"],`+
			`"profiles":["kns.ns-1"],"ports":[{"name":"http","protocol":"TCP","port":80}]}}`, name, i, i, i, i+1)
		items = append(items, item{kind: api.KindWorkloadEndpoint, key: datastore.Key(api.KindWorkloadEndpoint, name),
			name: name, value: []byte(val), rev: int64(i + 1)})
	}
	b := decodeBatch(true, 3, items, nil, nil)
	if len(b.Updates) != 3 {
		t.Fatalf("decoded %d of 3", len(b.Updates))
	}
	w0, w1 := b.Updates[0].Resource.(*api.WorkloadEndpoint), b.Updates[1].Resource.(*api.WorkloadEndpoint)
	same := func(what, a, b string) {
		t.Helper()
		if a != b || unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("%s: %q and %q are not one copy", what, a, b)
		}
	}
	same("label value", w0.Metadata.Labels["app"], w1.Metadata.Labels["app"])
	same("namespace label", w0.Metadata.Labels["projectcalico.org/namespace"], w1.Metadata.Labels["projectcalico.org/namespace"])
	same("node", w0.Spec.Node, w1.Spec.Node)
	same("profile", w0.Spec.Profiles[0], w1.Spec.Profiles[0])
	same("port name", w0.Spec.Ports[0].Name, w1.Spec.Ports[0].Name)
	for k := range w0.Metadata.Labels {
		for k1 := range w1.Metadata.Labels {
			if k == k1 {
				same("label key", k, k1)
			}
		}
	}
	w0.Metadata.Labels["app"] = "changed"
	if w1.Metadata.Labels["app"] != "web" || w0.Metadata.Name == w1.Metadata.Name || w1.Spec.Pod != "pod1" {
		t.Fatalf("endpoints share more than strings: %+v", w1)
	}
}

// A sharer kept for a whole snapshot holds at most sharerMax strings:
// every pod's own strings pass through it too.
func TestSharerIsBounded(t *testing.T) {
	sh := sharer{}
	for i := range 3 * sharerMax {
		s := fmt.Sprintf("pod-%d", i)
		if got := sh.str(s); got != s {
			t.Fatalf("shared %q as %q", s, got)
		}
		if len(sh) > sharerMax {
			t.Fatalf("the sharer holds %d strings, more than %d", len(sh), sharerMax)
		}
	}
	if v := sh.str("pod-0"); v != "pod-0" {
		t.Fatalf("a string shared again after a clear came back as %q", v)
	}
}
