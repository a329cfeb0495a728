package cni_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
)

// routedIPAMConf is a routed-cni entry delegating to routed-ipam.
func (n *node) routedIPAMConf(ipamExtra map[string]any) netconf {
	rc := n.routedConf("")
	// The node's own routed CNI socket: absent unless the test starts
	// the service (startDaemon), so the plugin does the work itself.
	rc["routed_socket"] = n.cniSocket()
	im := map[string]any{"type": "routed-ipam"}
	for k, v := range ipamExtra {
		im[k] = v
	}
	rc["ipam"] = im
	return rc
}

func (n *node) createPool(t testing.TB, name, cidr string, blockSize int) {
	t.Helper()
	p := &api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr, BlockSize: blockSize}}
	if _, err := n.store.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// inUse counts allocated addresses in every pool.
func (n *node) inUse(t testing.TB) int {
	t.Helper()
	u, err := ipam.New(n.store).Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range u.Pools {
		total += p.InUse
	}
	return total
}

func (n *node) assertCleanRoutedIPAM(t testing.TB) {
	t.Helper()
	n.assertClean(t, "none")
	if u := n.inUse(t); u != 0 {
		t.Errorf("%d addresses still allocated", u)
	}
}

// TestRoutedIPAM runs routed-cni with routed-ipam: addresses from an
// etcd IP pool, at several spec versions, fixed IPs both ways, pods
// reaching each other, and clean release.
func TestRoutedIPAM(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "pool-a", "10.90.0.0/16", 26)

	for _, v := range []string{"0.3.1", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			l := confList(t, "routed-net", v, n.routedIPAMConf(nil))
			a, b := newPod(t, "ra"), newPod(t, "rb")
			ra, rb := n.mustAdd(l, a.rt()), n.mustAdd(l, b.rt())
			ipA, ipB := ra.IPs[0].Address.IP, rb.IPs[0].Address.IP
			if !strings.HasPrefix(ipA.String(), "10.90.") || ipA.Equal(ipB) {
				t.Fatalf("addresses %s and %s", ipA, ipB)
			}
			held, err := ipam.New(n.store).IPsByHandle(context.Background(), "routed-net."+a.containerID)
			if err != nil || len(held) != 1 || held[0].String() != ipA.String() {
				t.Fatalf("handle routed-net.%s holds %v (%v), want %s", a.containerID, held, err, ipA)
			}
			if out, err := inPod(a, "ping", "-c", "1", "-W", "2", ipB.String()); err != nil {
				t.Fatalf("ping: %v\n%s", err, out)
			}
			if v != "0.3.1" {
				if err := n.check(l, a.rt()); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
			}
			for _, p := range []*pod{a, b} {
				if err := n.del(l, p.rt()); err != nil {
					t.Fatal(err)
				}
				if err := n.del(l, p.rt()); err != nil {
					t.Fatalf("second DEL: %v", err)
				}
			}
			n.assertCleanRoutedIPAM(t)
		})
	}

	t.Run("fixed IP", func(t *testing.T) {
		rc := n.routedIPAMConf(nil)
		rc["capabilities"] = map[string]bool{"ips": true}
		l := confList(t, "routed-net", "1.1.0", rc)
		p := newPod(t, "fixed-cap")
		rt := p.rt()
		rt.CapabilityArgs = map[string]any{"ips": []string{"10.90.200.7"}}
		if got := n.mustAdd(l, rt).IPs[0].Address.IP.String(); got != "10.90.200.7" {
			t.Errorf("runtimeConfig ips: got %s", got)
		}
		q := newPod(t, "fixed-args")
		rq := q.rt()
		rq.Args = append(rq.Args, [2]string{"IP", "10.90.200.9"})
		if got := n.mustAdd(l, rq).IPs[0].Address.IP.String(); got != "10.90.200.9" {
			t.Errorf("CNI_ARGS IP: got %s", got)
		}
		// The same address again is refused, and nothing is left behind.
		r2 := newPod(t, "fixed-dup").rt()
		r2.CapabilityArgs = map[string]any{"ips": []string{"10.90.200.7"}}
		if _, err := n.add(l, r2); err == nil || !strings.Contains(err.Error(), "10.90.200.7") {
			t.Errorf("duplicate fixed IP: %v", err)
		}
		for _, r := range []*libcni.RuntimeConf{rt, rq} {
			if err := n.del(l, r); err != nil {
				t.Fatal(err)
			}
		}
		n.assertCleanRoutedIPAM(t)
	})

	t.Run("exhausted pool", func(t *testing.T) {
		n.createPool(t, "tiny", "10.91.0.0/30", 30)
		l := confList(t, "routed-net", "1.1.0", n.routedIPAMConf(map[string]any{"ipv4_pools": []string{"tiny"}}))
		var rts []*libcni.RuntimeConf
		var err error
		for i := 0; i < 6 && err == nil; i++ {
			rt := newPod(t, fmt.Sprintf("tiny-%d", i)).rt()
			if _, err = n.add(l, rt); err == nil {
				rts = append(rts, rt)
			}
		}
		if err == nil || !strings.Contains(err.Error(), "tiny") || !strings.Contains(err.Error(), "no free addresses") {
			t.Fatalf("after %d pods: %v, want an exhaustion error naming pool tiny", len(rts), err)
		}
		for _, rt := range rts {
			if err := n.del(l, rt); err != nil {
				t.Fatal(err)
			}
		}
		n.assertCleanRoutedIPAM(t)
	})
}

// TestRoutedIPAMGCStatusEtcdDown covers GC (endpoint-backed and
// endpoint-less allocations), STATUS, and an unreachable etcd.
func TestRoutedIPAMGCStatusEtcdDown(t *testing.T) {
	n := newNode(t)
	l := confList(t, "routed-net", "1.1.0", n.routedIPAMConf(map[string]any{"gc_grace_seconds": -1}))
	status := func() error {
		return n.hostDo(func() error { return n.cni.GetStatusNetworkList(context.Background(), l) })
	}
	if err := status(); cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "no IP pool") {
		t.Fatalf("STATUS without pools: %v (code %d), want 50 saying no pool", err, cniCode(err))
	}
	n.createPool(t, "pool-a", "10.92.0.0/16", 26)
	if err := status(); err != nil {
		t.Fatalf("STATUS: %v", err)
	}

	keep, stale := newPod(t, "keep"), newPod(t, "stale")
	n.mustAdd(l, keep.rt())
	n.mustAdd(l, stale.rt())
	// An allocation whose ADD died before the endpoint was written.
	orphan := "routed-net.0123456789abcdef"
	if _, err := ipam.New(n.store).AutoAssign(context.Background(), ipam.AssignArgs{Node: n.name, HandleID: orphan, Num: 1}); err != nil {
		t.Fatal(err)
	}
	gcRuntime := newRuntime(n.cni.Path, t.TempDir())
	if err := n.hostDo(func() error {
		return gcRuntime.GCNetworkList(context.Background(), l, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: keep.containerID, IfName: "eth0"}}})
	}); err != nil {
		t.Fatalf("GC: %v\n%s", err, n.logTail())
	}
	ic := ipam.New(n.store)
	for h, want := range map[string]int{orphan: 0, "routed-net." + stale.containerID: 0, "routed-net." + keep.containerID: 1} {
		if held, _ := ic.IPsByHandle(context.Background(), h); len(held) != want {
			t.Errorf("after GC handle %s holds %v, want %d", h, held, want)
		}
	}
	if err := n.del(l, keep.rt()); err != nil {
		t.Fatal(err)
	}
	n.assertCleanRoutedIPAM(t)

	// etcd unreachable: IPAM fails first with code 11; nothing is created.
	n.proxy.Close()
	_, err := n.add(l, newPod(t, "down").rt())
	if cniCode(err) != types.ErrTryAgainLater {
		t.Fatalf("ADD with etcd down: %v (code %d), want 11", err, cniCode(err))
	}
	if c := n.caliLinks(); len(c) > 0 {
		t.Errorf("veth left after failed ADD: %v", c)
	}
	if err := status(); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with etcd down: %v (code %d), want 50", err, cniCode(err))
	}
	n.assertCleanRoutedIPAM(t)
}
