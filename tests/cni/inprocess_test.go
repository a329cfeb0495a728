package cni_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
)

// noIPAMBinDir is a CNI_PATH directory holding routed-cni but not
// routed-ipam, so any routed-ipam verb that works through it ran inside
// routed-cni. The reference directory must not hold routed-ipam either.
func (n *node) noIPAMBinDir(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(n.binDir, "routed-cni"), filepath.Join(dir, "routed-cni")); err != nil {
		t.Fatal(err)
	}
	path := []string{dir, n.refDir}
	if p, err := invoke.FindInPath("routed-ipam", path); err == nil {
		t.Fatalf("routed-ipam found at %s: the in-process test would prove nothing", p)
	}
	return path
}

// TestRoutedIPAMInProcess: with ipam.type routed-ipam, routed-cni serves
// every verb without the routed-ipam executable (absent from CNI_PATH),
// with routed-ipam's semantics: handle "<network>.<containerID>",
// attributes, fixed IPs, CHECK, GC, STATUS, and no leak on any failure
// after the address was assigned.
func TestRoutedIPAMInProcess(t *testing.T) {
	n := newNode(t)
	rt := newRuntime(n.noIPAMBinDir(t), t.TempDir())
	conf := func(extra map[string]any) *libcni.NetworkConfigList {
		im := map[string]any{"gc_grace_seconds": -1}
		for k, v := range extra {
			im[k] = v
		}
		rc := n.routedIPAMConf(im)
		rc["capabilities"] = map[string]bool{"ips": true}
		return confList(t, "routed-net", "1.1.0", rc)
	}
	l := conf(nil)
	add := func(l *libcni.NetworkConfigList, r *libcni.RuntimeConf) (*current.Result, error) {
		var res types.Result
		err := n.hostDo(func() error {
			var err error
			res, err = rt.AddNetworkList(context.Background(), l, r)
			return err
		})
		if err != nil {
			return nil, err
		}
		return current.NewResultFromResult(res)
	}
	del := func(l *libcni.NetworkConfigList, r *libcni.RuntimeConf) {
		t.Helper()
		if err := n.hostDo(func() error { return rt.DelNetworkList(context.Background(), l, r) }); err != nil {
			t.Fatalf("DEL %s: %v\n%s", r.ContainerID, err, n.logTail())
		}
	}
	status := func() error {
		return n.hostDo(func() error { return rt.GetStatusNetworkList(context.Background(), l) })
	}

	if err := status(); cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "no IP pool") {
		t.Fatalf("STATUS without pools: %v (code %d), want 50 saying no pool", err, cniCode(err))
	}
	n.createPool(t, "pool-a", "10.93.0.0/16", 26)
	if err := status(); err != nil {
		t.Fatalf("STATUS: %v", err)
	}

	a, b := newPod(t, "inproc-a"), newPod(t, "inproc-b")
	ra := a.rt()
	ra.Args = append(ra.Args, [2]string{"IP", "10.93.7.7"})
	resA, err := add(l, ra)
	if err != nil {
		t.Fatalf("ADD a: %v\n%s", err, n.logTail())
	}
	resB, err := add(l, b.rt())
	if err != nil {
		t.Fatalf("ADD b: %v\n%s", err, n.logTail())
	}
	if got := resA.IPs[0].Address.IP.String(); got != "10.93.7.7" {
		t.Errorf("CNI_ARGS IP: got %s", got)
	}
	ic := ipam.New(n.store)
	ipB := netip.MustParseAddr(resB.IPs[0].Address.IP.String())
	info, err := ic.IPInfo(context.Background(), ipB)
	if err != nil || info.Handle != "routed-net."+b.containerID || info.Namespace != "default" || info.Pod != "inproc-b" || info.Node != n.name {
		t.Fatalf("allocation of %s: %+v (%v), want handle routed-net.%s, pod default/inproc-b on %s", ipB, info, err, b.containerID, n.name)
	}
	if out, err := inPod(a, "ping", "-c", "1", "-W", "2", ipB.String()); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	if err := n.hostDo(func() error { return rt.CheckNetworkList(context.Background(), l, ra) }); err != nil {
		t.Fatalf("CHECK: %v\n%s", err, n.logTail())
	}

	// GC keeps a; removes b (stale endpoint) and an allocation whose ADD
	// died before its endpoint was written.
	orphan := "routed-net.00000000deadbeef"
	if _, err := ic.AutoAssign(context.Background(), ipam.AssignArgs{Node: n.name, HandleID: orphan, Num: 1}); err != nil {
		t.Fatal(err)
	}
	gcRuntime := newRuntime(rt.Path, t.TempDir())
	if err := n.hostDo(func() error {
		return gcRuntime.GCNetworkList(context.Background(), l, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: a.containerID, IfName: "eth0"}}})
	}); err != nil {
		t.Fatalf("GC: %v\n%s", err, n.logTail())
	}
	for h, want := range map[string]int{orphan: 0, "routed-net." + b.containerID: 0, "routed-net." + a.containerID: 1} {
		if held, _ := ic.IPsByHandle(context.Background(), h); len(held) != want {
			t.Errorf("after GC handle %s holds %v, want %d", h, held, want)
		}
	}
	if n.hostLinkExists(kernel.HostDeviceName(b.namespace, b.name, b.containerID)) {
		t.Error("GC left the stale host veth")
	}
	del(l, ra)
	del(l, ra)
	n.assertCleanRoutedIPAM(t)

	// Failures after the address was assigned: rollback releases it.
	t.Run("veth creation fails", func(t *testing.T) {
		rc := n.routedIPAMConf(nil)
		rc["mtu"] = 60 // below the veth minimum: netlink fails after IPAM
		_, err := add(confList(t, "routed-net", "1.1.0", rc), newPod(t, "tinymtu").rt())
		if err == nil || !strings.Contains(err.Error(), "MTU 60") {
			t.Fatalf("got %v, want a veth creation failure naming MTU 60", err)
		}
		n.assertCleanRoutedIPAM(t)
	})
	t.Run("container interface exists", func(t *testing.T) {
		p := newPod(t, "ifclash")
		p.ifName = "lo"
		_, err := add(l, p.rt())
		if cniCode(err) != types.ErrInvalidEnvironmentVariables {
			t.Fatalf("got %v (code %d), want code 4", err, cniCode(err))
		}
		n.assertCleanRoutedIPAM(t)
	})
	t.Run("bad ipam section", func(t *testing.T) {
		_, err := add(conf(map[string]any{"assign_ipv6": "yes"}), newPod(t, "v6").rt())
		if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `assign_ipv6 is "yes"; want "true" or "false"`) {
			t.Fatalf("got %v (code %d), want code 7 about assign_ipv6", err, cniCode(err))
		}
		n.assertCleanRoutedIPAM(t)
	})
	t.Run("etcd unreachable", func(t *testing.T) {
		rc := n.routedIPAMConf(nil)
		rc["etcd_endpoints"] = "http://127.0.0.1:1"
		_, err := add(confList(t, "routed-net", "1.1.0", rc), newPod(t, "noetcd").rt())
		if cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("got %v (code %d), want code 11", err, cniCode(err))
		}
		n.assertCleanRoutedIPAM(t)
	})
}

// TestRoutedIPAMSameErrorsAsBinary: for the same stdin and CNI_ARGS,
// routed-cni's in-process IPAM fails with the code and message the
// routed-ipam executable returns, wrapped as routed-cni wraps a
// delegated plugin's error.
func TestRoutedIPAMSameErrorsAsBinary(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "pool-a", "10.94.0.0/16", 26)
	path := n.noIPAMBinDir(t)
	ipamBin := filepath.Join(n.binDir, "routed-ipam")
	cniBin, err := invoke.FindInPath("routed-cni", path)
	if err != nil {
		t.Fatal(err)
	}
	taken := newPod(t, "taken")
	rt := taken.rt()
	rt.Args = append(rt.Args, [2]string{"IP", "10.94.1.1"})
	n.mustAdd(confList(t, "routed-net", "1.1.0", n.routedIPAMConf(nil)), rt)

	for name, tc := range map[string]struct {
		ipam map[string]any
		args string
	}{
		"address taken":     {args: ";IP=10.94.1.1"},
		"unknown pool":      {ipam: map[string]any{"ipv4_pools": []string{"no-such-pool"}}},
		"two fixed IPs":     {args: ";IP=10.94.1.2,10.94.1.3"},
		"ipv6 without pool": {ipam: map[string]any{"assign_ipv6": "true"}},
		"no family":         {ipam: map[string]any{"assign_ipv4": "false", "assign_ipv6": "false"}},
		"pools not names":   {ipam: map[string]any{"ipv4_pools": "pool-a"}},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPod(t, "dup")
			stdin := n.stdin(t, n.routedIPAMConf(tc.ipam))
			args := &invoke.Args{Command: "ADD", ContainerID: p.containerID, NetNS: p.netns.Path(), IfName: "eth0", Path: strings.Join(path, ":"),
				PluginArgsStr: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=dup" + tc.args}
			var binErr, cniErr error
			n.inHost(func() error {
				_, binErr = invoke.ExecPluginWithResult(context.Background(), ipamBin, stdin, args, nil)
				_, cniErr = invoke.ExecPluginWithResult(context.Background(), cniBin, stdin, args, nil)
				return nil
			})
			var be, ce *types.Error
			if !errors.As(binErr, &be) || !errors.As(cniErr, &ce) {
				t.Fatalf("routed-ipam: %v; routed-cni: %v; want both to fail with CNI errors", binErr, cniErr)
			}
			want := "IPAM plugin routed-ipam failed to assign an address to pod default/dup: " + be.Msg
			if ce.Code != be.Code || ce.Msg != want {
				t.Errorf("routed-cni: code %d %q\nwant code %d %q", ce.Code, ce.Msg, be.Code, want)
			}
			if held, _ := ipam.New(n.store).IPsByHandle(context.Background(), "routed-net."+p.containerID); len(held) > 0 {
				t.Errorf("failed ADD left %v held", held)
			}
		})
	}
}

// TestRoutedIPAMBinary: the routed-ipam executable keeps working for main
// plugins other than routed-cni, which delegate to it as below.
func TestRoutedIPAMBinary(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "pool-a", "10.95.0.0/16", 26)
	bin := filepath.Join(n.binDir, "routed-ipam")
	p := newPod(t, "chained")
	stdin := n.stdin(t, n.routedIPAMConf(map[string]any{"gc_grace_seconds": -1}))
	run := func(cmd string, stdin []byte) (types.Result, error) {
		args := &invoke.Args{Command: cmd, ContainerID: p.containerID, NetNS: p.netns.Path(), IfName: "eth0", Path: n.binDir,
			PluginArgsStr: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=chained"}
		var res types.Result
		err := n.hostDo(func() error {
			var err error
			if cmd == "ADD" {
				res, err = invoke.ExecPluginWithResult(context.Background(), bin, stdin, args, nil)
			} else {
				err = invoke.ExecPluginWithoutResult(context.Background(), bin, stdin, args, nil)
			}
			return err
		})
		return res, err
	}
	r, err := run("ADD", stdin)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil || len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "10.95.") || !strings.HasSuffix(res.IPs[0].Address.String(), "/32") {
		t.Fatalf("ADD result %+v (%v)", res, err)
	}
	held, err := ipam.New(n.store).IPsByHandle(context.Background(), "routed-net."+p.containerID)
	if err != nil || len(held) != 1 || held[0].String() != res.IPs[0].Address.IP.String() {
		t.Fatalf("handle holds %v (%v)", held, err)
	}
	withPrev := n.stdin(t, n.routedIPAMConf(map[string]any{"gc_grace_seconds": -1}), "prevResult", res)
	if _, err := run("CHECK", withPrev); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if _, err := run("STATUS", stdin); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	for range 2 {
		if _, err := run("DEL", stdin); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if _, err := run("CHECK", withPrev); cniCode(err) != types.ErrInternal || !strings.Contains(err.Error(), "not allocated") {
		t.Errorf("CHECK after DEL: %v (code %d)", err, cniCode(err))
	}
	n.assertCleanRoutedIPAM(t)

	// A configuration routed-cni's parser refuses is code 7 here too.
	bad := n.routedIPAMConf(nil)
	delete(bad, "etcd_endpoints")
	if _, err := run("ADD", n.stdin(t, bad)); cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "etcd_endpoints") {
		t.Errorf("ADD without etcd_endpoints: %v (code %d), want 7", err, cniCode(err))
	}
}

// stdin is a plugin's stdin as a runtime builds it from one conflist
// entry: name and cniVersion added, plus any extra key/value pairs.
func (n *node) stdin(t *testing.T, c netconf, extra ...any) []byte {
	t.Helper()
	m := map[string]any{"name": "routed-net", "cniVersion": version.Current()}
	for k, v := range c {
		m[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
