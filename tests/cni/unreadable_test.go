package cni_test

import (
	"context"
	"testing"

	"github.com/containernetworking/cni/libcni"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestDelUnreadableEndpoint: a DEL whose WorkloadEndpoint record does
// not decode tears the pod down all the same (veth, addresses, and the
// record when it still names the DEL's container), on each path a DEL
// takes: host-local IPAM, routed-ipam in process, and through routed.
// Before, each failed on the record, and the runtime's retries failed
// for ever: the pod stayed, its address held. A record that names
// another container (a newer sandbox of the same pod), or none it can
// read, is left.
func TestDelUnreadableEndpoint(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "unreadable", "10.86.0.0/24", 26)
	// corrupt overwrites p's endpoint record (of network) with raw and
	// returns its key.
	corrupt := func(t *testing.T, p *pod, raw string) string {
		t.Helper()
		var key string
		for _, w := range n.endpoints() {
			if w.Spec.ContainerID == p.containerID {
				key = datastore.Key(api.KindWorkloadEndpoint, w.Metadata.Name)
			}
		}
		if key == "" {
			t.Fatalf("no endpoint of container %s", p.containerID)
		}
		if _, err := n.store.Etcd().Put(context.Background(), key, raw); err != nil {
			t.Fatal(err)
		}
		return key
	}
	stored := func(t *testing.T, key string) bool {
		t.Helper()
		resp, err := n.store.Etcd().Get(context.Background(), key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count > 0
	}
	delGone := func(t *testing.T, l *libcni.NetworkConfigList, p *pod, key string) {
		t.Helper()
		if err := n.del(l, p.rt()); err != nil {
			t.Fatalf("DEL with the record unreadable: %v\n%s", err, n.logTail())
		}
		if stored(t, key) {
			t.Errorf("DEL left the unreadable record %s", key)
		}
	}

	t.Run("host-local", func(t *testing.T) {
		l := confList(t, "hl-net", "1.1.0", n.routedConf("10.87.0.0/24"))
		p := newPod(t, "hl")
		res := n.mustAdd(l, p.rt())
		delGone(t, l, p, corrupt(t, p, `{"spec": {"containerID": "`+p.containerID+`", "ports": 1}}`))
		n.assertClean(t, "hl-net", res.IPs[0].Address.IP)
	})
	ri := confList(t, "ri-net", "1.1.0", n.routedIPAMConf(nil))
	t.Run("routed-ipam in process, naming no container", func(t *testing.T) {
		// Not JSON: it could be a newer sandbox's, so it stays; the DEL
		// still succeeds and frees its own address.
		p := newPod(t, "ri")
		n.mustAdd(ri, p.rt())
		key := corrupt(t, p, `not json`)
		if err := n.del(ri, p.rt()); err != nil {
			t.Fatalf("DEL: %v\n%s", err, n.logTail())
		}
		if !stored(t, key) {
			t.Fatal("DEL deleted a record that names no container it can read")
		}
		if u := n.inUse(t); u != 0 {
			t.Errorf("DEL kept %d addresses of its own container", u)
		}
		if _, err := n.store.Etcd().Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		n.assertCleanRoutedIPAM(t)
	})
	t.Run("routed-ipam in process, a newer sandbox's", func(t *testing.T) {
		p := newPod(t, "newer")
		n.mustAdd(ri, p.rt())
		key := corrupt(t, p, `{"spec": {"containerID": "newer-sandbox", "ports": 1}}`)
		if err := n.del(ri, p.rt()); err != nil {
			t.Fatalf("DEL: %v\n%s", err, n.logTail())
		}
		if !stored(t, key) {
			t.Fatal("DEL deleted the record of another container")
		}
		if u := n.inUse(t); u != 0 {
			t.Errorf("DEL kept %d addresses of its own container", u)
		}
		// Once that record is gone, DEL again takes the rest.
		if _, err := n.store.Etcd().Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if err := n.del(ri, p.rt()); err != nil {
			t.Fatal(err)
		}
		n.assertCleanRoutedIPAM(t)
	})
	t.Run("through routed", func(t *testing.T) {
		n.startDaemon(t)
		p := newPod(t, "via")
		res := n.mustAdd(ri, p.rt())
		delGone(t, ri, p, corrupt(t, p, `{"metadata": {"name": 1}, "spec": {"containerID": "`+p.containerID+`"}}`))
		n.assertClean(t, "none", res.IPs[0].Address.IP)
		if u := n.inUse(t); u != 0 {
			t.Errorf("%d addresses still allocated", u)
		}
		// A newer sandbox's: routed's release leaves it, and says so.
		q := newPod(t, "via-newer")
		n.mustAdd(ri, q.rt())
		key := corrupt(t, q, `{"spec": {"containerID": "newer-sandbox", "ports": 1}}`)
		if err := n.del(ri, q.rt()); err != nil {
			t.Fatalf("DEL: %v\n%s", err, n.logTail())
		}
		if !stored(t, key) {
			t.Fatal("routed's DEL deleted the record of another container")
		}
		if u := n.inUse(t); u != 0 {
			t.Errorf("DEL kept %d addresses of its own container", u)
		}
		if _, err := n.store.Etcd().Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		n.assertCleanRoutedIPAM(t)
	})
}
