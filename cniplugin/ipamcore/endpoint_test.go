//go:build !cnithin

package ipamcore

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// What a release's lost write saw decides: an endpoint record that does
// not decode is the DEL's container's only while it still names it, and
// the next attempt deletes it at the revision seen, or only guards it.
func TestEndpointDelObservesUnreadable(t *testing.T) {
	for _, c := range []struct {
		raw  string
		ours bool
	}{
		{`{"spec": {"containerID": "c1", "ports": 1}}`, true},
		{`{"spec": {"containerID": "c2", "ports": 1}}`, false},
		{`not json`, false},
		{`{"spec": {"containerID": "c1"`, false},
		{`{"spec": {"containerID": 7}}`, false},
	} {
		e := NewEndpointDel("n1-k8s-default-p-eth0", "c1", 5, true)
		if err := e.Observe(e.Key(), &mvccpb.KeyValue{Key: []byte(e.Key()), Value: []byte(c.raw), ModRevision: 9}); err != nil {
			t.Fatalf("%s: Observe: %v", c.raw, err)
		}
		if e.Ours() != c.ours {
			t.Errorf("%s: ours %v, want %v", c.raw, e.Ours(), c.ours)
		}
		ws, err := e.Writes(nil)
		if err != nil || len(ws) != 1 {
			t.Fatalf("%s: Writes %v, %v", c.raw, ws, err)
		}
		if w := ws[0]; w.Rev != 9 || w.AnyRev || w.Guard == c.ours || w.Value != nil {
			t.Errorf("%s: write %+v, want at revision 9, a delete when ours and a guard otherwise", c.raw, w)
		}
	}
}
