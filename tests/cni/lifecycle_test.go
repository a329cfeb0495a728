package cni_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/routed-net/routed/pkg/kernel"
)

// TestGCAndStatus (spec 1.1.0): GC removes attachments the runtime no
// longer lists and keeps the others; STATUS fails with code 50 when etcd
// cannot be reached.
func TestGCAndStatus(t *testing.T) {
	n := newNode(t)
	l := confList(t, "routed-net", "1.1.0", n.routedConf("10.83.0.0/24"))
	keep, stale := newPod(t, "keep"), newPod(t, "stale")
	rk := n.mustAdd(l, keep.rt())
	rs := n.mustAdd(l, stale.rt())

	if err := n.hostDo(func() error { return n.cni.GetStatusNetworkList(context.Background(), l) }); err != nil {
		t.Fatalf("STATUS with etcd up: %v", err)
	}

	// A runtime with no cached attachments, so libcni does not DEL the
	// stale one itself: the plugin's GC must do the work.
	gcRuntime := newRuntime(n.cni.Path, t.TempDir())
	valid := []types.GCAttachment{{ContainerID: keep.containerID, IfName: keep.ifName}}
	if err := n.hostDo(func() error {
		return gcRuntime.GCNetworkList(context.Background(), l, &libcni.GCArgs{ValidAttachments: valid})
	}); err != nil {
		t.Fatalf("GC: %v\n%s", err, n.logTail())
	}
	if n.hostLinkExists(kernel.HostDeviceName(stale.namespace, stale.name, stale.containerID)) {
		t.Error("GC left the stale host veth")
	}
	if !n.hostLinkExists(kernel.HostDeviceName(keep.namespace, keep.name, keep.containerID)) {
		t.Error("GC removed a valid attachment's veth")
	}
	weps := n.endpoints()
	if len(weps) != 1 || weps[0].Spec.ContainerID != keep.containerID {
		t.Errorf("endpoints after GC: %d, want only %s", len(weps), keep.containerID)
	}
	allocs := n.hostLocalAllocations("routed-net")
	if len(allocs) != 1 || allocs[0] != rk.IPs[0].Address.IP.String() {
		t.Errorf("allocations after GC %v, want only %s (stale had %s)", allocs, rk.IPs[0].Address.IP, rs.IPs[0].Address.IP)
	}
	if err := n.check(l, keep.rt()); err != nil {
		t.Errorf("CHECK of the kept pod after GC: %v", err)
	}

	n.proxy.Close()
	err := n.hostDo(func() error { return n.cni.GetStatusNetworkList(context.Background(), l) })
	if cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "datastore") {
		t.Fatalf("STATUS with etcd down: %v (code %d), want code 50 about the datastore", err, cniCode(err))
	}
}

// TestConcurrentAdds: eight pods added and deleted at once on one node
// all get distinct addresses and working attachments.
func TestConcurrentAdds(t *testing.T) {
	n := newNode(t)
	l := confList(t, "routed-net", "1.1.0", n.routedConf("10.84.0.0/24"))
	const count = 8
	pods := make([]*pod, count)
	for i := range pods {
		pods[i] = newPod(t, fmt.Sprintf("par-%d", i))
	}
	results := make([]*current.Result, count)
	var wg sync.WaitGroup
	errs := make([]error, count)
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := n.add(l, p.rt())
			if err == nil {
				results[i], err = current.NewResultFromResult(res)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		ip := results[i].IPs[0].Address.IP.String()
		if seen[ip] {
			t.Errorf("address %s given twice", ip)
		}
		seen[ip] = true
	}
	if len(n.endpoints()) != count || len(n.caliLinks()) != count {
		t.Errorf("%d endpoints, %d veths; want %d", len(n.endpoints()), len(n.caliLinks()), count)
	}
	// Every pod reaches the next one through the host.
	for i, p := range pods {
		next := results[(i+1)%count].IPs[0].Address.IP.String()
		if out, err := inPod(p, "ping", "-c", "1", "-W", "2", next); err != nil {
			t.Errorf("ping from %s to %s: %v\n%s", p.name, next, err, out)
		}
	}
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.del(l, p.rt())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	n.assertClean(t, "routed-net")
}

// TestCnitoolSmoke uses the reference runtime client, cnitool, with a
// conflist in NETCONFPATH, exactly as an operator would.
func TestCnitoolSmoke(t *testing.T) {
	n := newNode(t)
	netdir := t.TempDir()
	name := "routed-smoke-" + randHex(3)
	rc := n.routedConf("10.85.0.0/24")
	conf := map[string]any{"cniVersion": "1.1.0", "name": name, "plugins": []netconf{rc}}
	b, _ := jsonMarshal(conf)
	if err := os.WriteFile(filepath.Join(netdir, "10-routed.conflist"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := newPod(t, "cnitool-pod")
	run := func(verb string) string {
		t.Helper()
		var out []byte
		err := n.hostDo(func() error {
			cmd := exec.Command(filepath.Join(n.refDir, "cnitool"), verb, name, p.netns.Path())
			cmd.Env = append(os.Environ(),
				"NETCONFPATH="+netdir,
				"CNI_PATH="+n.binDir+":"+n.refDir,
				"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=cnitool-pod",
			)
			var err error
			out, err = cmd.CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("cnitool %s: %v\n%s\nlog:\n%s", verb, err, out, n.logTail())
		}
		return string(out)
	}
	out := run("add")
	if !strings.Contains(out, `"cniVersion": "1.1.0"`) || !strings.Contains(out, "10.85.0.") {
		t.Errorf("cnitool add printed:\n%s", out)
	}
	run("check")
	run("status")
	run("del")
	n.assertClean(t, name)
}
