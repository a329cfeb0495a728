package cni_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// etcdRevision is etcd's current revision: every transaction that
// writes bumps it by one, whatever it writes.
func (n *node) etcdRevision(t testing.TB) int64 {
	t.Helper()
	resp, err := n.store.Etcd().Get(context.Background(), "/routed/v1/none")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// checkEndpointWritten fails unless the pod's WorkloadEndpoint names ip
// and the MAC of the pod's eth0, and was written in the transaction
// that wrote the pod's IPAM handle in network.
func (n *node) checkEndpointWritten(t testing.TB, p *pod, network string, ip net.IP) {
	t.Helper()
	var mac string
	if err := p.netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err == nil {
			mac = l.Attrs().HardwareAddr.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wep *api.WorkloadEndpoint
	for _, w := range n.endpoints() {
		if w.Spec.ContainerID == p.containerID {
			wep = w
		}
	}
	if wep == nil || len(wep.Spec.IPNetworks) != 1 || wep.Spec.IPNetworks[0] != ip.String()+"/32" || wep.Spec.MAC != mac {
		t.Fatalf("endpoint %+v, want %s/32 and MAC %s", wep, ip, mac)
	}
	hresp, err := n.store.Etcd().Get(context.Background(), "/routed/v1/ipam/handles/"+network+"."+p.containerID)
	if err != nil || len(hresp.Kvs) != 1 {
		t.Fatalf("handle: %v %v", hresp, err)
	}
	if rev := strconv.FormatInt(hresp.Kvs[0].ModRevision, 10); rev != wep.Metadata.ResourceVersion {
		t.Errorf("handle written at %s, endpoint at %s: not one transaction", rev, wep.Metadata.ResourceVersion)
	}
}

// TestDirectOneTransaction: with routed not serving, an exec'd ADD
// with routed-ipam writes the block, the handle and the
// WorkloadEndpoint (naming the container's MAC and address) in one etcd
// transaction, after one read once an earlier ADD claimed the node's
// block (the pools, the node's affinities and the block it left in the
// hint file); a DEL deletes them in one transaction after two reads
// (the endpoint with the handle, then the blocks). The
// pod is reachable in between; nothing is left after, `ipam check` is
// clean.
func TestDirectOneTransaction(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "direct", "10.87.0.0/24", 26)
	l := confList(t, "direct-net", "1.1.0", n.routedIPAMConf(nil))
	warm := newPod(t, "warm") // claims the node's block
	n.mustAdd(l, warm.rt())

	p := newPod(t, "web")
	r0 := n.etcdRevision(t)
	u0, _ := n.etcdUnary(t)
	res := n.mustAdd(l, p.rt())
	u1, _ := n.etcdUnary(t)
	if r1 := n.etcdRevision(t); r1-r0 != 1 {
		t.Errorf("direct ADD wrote %d transactions, want 1", r1-r0)
	}
	t.Logf("direct ADD: %.0f etcd requests", u1-u0)
	if reqs := u1 - u0; reqs > 2 {
		t.Errorf("direct ADD made %.0f etcd requests, want 2 (the pools, affinities and the node's block kept from the last call; the write)", reqs)
	}
	ip := res.IPs[0].Address.IP
	n.checkEndpointWritten(t, p, "direct-net", ip)
	if out, err := inPod(warm, "ping", "-c1", "-W2", ip.String()); err != nil {
		t.Errorf("ping from another pod: %v\n%s", err, out)
	}

	r0 = n.etcdRevision(t)
	u0, _ = n.etcdUnary(t)
	if err := n.del(l, p.rt()); err != nil {
		t.Fatal(err)
	}
	u1, _ = n.etcdUnary(t)
	if r1 := n.etcdRevision(t); r1-r0 != 1 {
		t.Errorf("direct DEL wrote %d transactions, want 1", r1-r0)
	}
	t.Logf("direct DEL: %.0f etcd requests", u1-u0)
	if reqs := u1 - u0; reqs > 3 {
		t.Errorf("direct DEL made %.0f etcd requests, want at most 3 (the endpoint with the handle, the blocks, the write)", reqs)
	}
	for i := range 2 {
		if err := n.del(l, p.rt()); err != nil {
			t.Fatalf("DEL again (%d): %v", i, err)
		}
	}
	if err := n.del(l, warm.rt()); err != nil {
		t.Fatal(err)
	}
	n.assertCleanRoutedIPAM(t)
	n.ipamClean(t)
}

// TestDirectRollback: with routed not serving, an ADD whose veth fails
// after (or while) routed-ipam assigned the address and wrote the
// endpoint leaves nothing: no interface, allocation or endpoint, and
// `ipam check` is clean. An endpoint of a newer sandbox of the same pod
// survives the DEL of the older one, and its veth too.
func TestDirectRollback(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "rb", "10.88.0.0/24", 26)
	l := confList(t, "rb-net", "1.1.0", n.routedIPAMConf(nil))

	p := newPod(t, "ifclash")
	p.ifName = "lo" // exists in every netns: the veth fails
	_, err := n.add(l, p.rt())
	if cniCode(err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), "lo already exists") {
		t.Fatalf("got %v (code %d), want code 4 about lo", err, cniCode(err))
	}
	n.assertCleanRoutedIPAM(t)

	rc := n.routedIPAMConf(nil)
	rc["mtu"] = 60 // below the veth minimum of 68
	_, err = n.add(confList(t, "rb-net", "1.1.0", rc), newPod(t, "tinymtu").rt())
	if err == nil || !strings.Contains(err.Error(), "MTU 60") {
		t.Fatalf("got %v, want a veth creation failure naming MTU 60", err)
	}
	n.assertCleanRoutedIPAM(t)

	// Two sandboxes of one pod: the second replaces the first's endpoint
	// (same name); the first's DEL must leave it and its veth alone.
	old := newPod(t, "twice")
	n.mustAdd(l, old.rt())
	if err := n.del(l, old.rt()); err != nil {
		t.Fatal(err)
	}
	newer := newPod(t, "twice")
	newer.containerID = strings.Repeat("b", 16)
	n.mustAdd(l, newer.rt())
	oldAgain := old.rt()
	if err := n.del(l, oldAgain); err != nil {
		t.Fatal(err)
	}
	if w := n.endpoints(); len(w) != 1 || w[0].Spec.ContainerID != newer.containerID {
		t.Fatalf("after the old sandbox's DEL: endpoints %v, want the newer sandbox's", w)
	}
	if veth := kernel.HostDeviceName(newer.namespace, newer.name, newer.containerID); !n.hostLinkExists(veth) {
		t.Fatalf("the old sandbox's DEL deleted the newer sandbox's %s", veth)
	}
	if err := n.del(l, newer.rt()); err != nil {
		t.Fatal(err)
	}
	n.assertCleanRoutedIPAM(t)
	n.ipamClean(t)
}
