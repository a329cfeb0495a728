package ipamcli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/ipam"
)

type fixture struct {
	t   *testing.T
	cfg datastore.Config
	ds  *datastore.Client
	c   *ipam.Client
}

func newFixture(t *testing.T) *fixture {
	srv := etcdtest.Start(t)
	cfg := datastore.Config{Endpoints: srv.Endpoints}
	ds, err := datastore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	f := &fixture{t: t, cfg: cfg, ds: ds, c: ipam.New(ds)}
	if _, err := ds.InitClusterInfo(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.apply(&api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: "default"}, Spec: api.IPPoolSpec{CIDR: "10.244.0.0/24", BlockSize: 26}})
	f.apply(&api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: "n1"}})
	return f
}

func (f *fixture) apply(r api.Resource) {
	f.t.Helper()
	if _, err := f.ds.Apply(context.Background(), r); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) assign(handle, pod string) netip.Addr {
	f.t.Helper()
	ips, err := f.c.AutoAssign(context.Background(), ipam.AssignArgs{Node: "n1", HandleID: handle, Attrs: ipam.Attributes{Namespace: "default", Pod: pod}})
	if err != nil {
		f.t.Fatal(err)
	}
	return ips[0]
}

func (f *fixture) wep(pod, handle string, ip netip.Addr) {
	f.apply(&api.WorkloadEndpoint{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName("n1", "k8s", "default", pod, "", "eth0")},
		Spec: api.WorkloadEndpointSpec{Node: "n1", Namespace: "default", Pod: pod, ContainerID: handle, InterfaceName: "cali0",
			IPNetworks: []string{netip.PrefixFrom(ip, 32).String()}, Handle: handle}})
}

// run executes `ipam args...` as routedctl would.
func (f *fixture) run(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := NewCommand(func() (*datastore.Client, error) { return datastore.New(f.cfg) }, &out)
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage = true
	err := cmd.Execute()
	return out.String(), err
}

func (f *fixture) mustRun(args ...string) string {
	f.t.Helper()
	out, err := f.run(args...)
	if err != nil {
		f.t.Fatalf("ipam %v: %v\n%s", args, err, out)
	}
	return out
}

func wantAll(t *testing.T, what, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("%s output lacks %q:\n%s", what, s, out)
		}
	}
}

func TestShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	web := f.assign("k8s-pod-network.web", "web-1")
	f.assign("k8s-pod-network.db", "db-1")

	wantAll(t, "show", f.mustRun("show"), "POOL", "IN USE", "default", "10.244.0.0/24", "256", "2 (1%)", "254")
	block := netip.PrefixFrom(web, 26).Masked().String()
	wantAll(t, "show --show-blocks", f.mustRun("show", "--show-blocks"), "BLOCK", block, "n1", "confirmed", "2/64")
	wantAll(t, "show --ip", f.mustRun("show", "--ip", web.String()),
		"Handle:", "k8s-pod-network.web", "Pod:", "web-1", "Namespace:", "default", "Node:", "n1", "Block:", block)
	wantAll(t, "show --ip free", f.mustRun("show", "--ip", "10.244.0.250"), "10.244.0.250 is not allocated")
	wantAll(t, "show --ip outside", f.mustRun("show", "--ip", "192.0.2.1"), "not allocated (it is in no IP pool)")
	if _, err := f.run("show", "--ip", "nonsense"); err == nil {
		t.Error("show --ip nonsense succeeded")
	}
}

func TestCheckReleaseGC(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	live := f.assign("k8s-pod-network.live", "live")
	f.wep("live", "k8s-pod-network.live", live)
	leaked := f.assign("k8s-pod-network.leaked", "leaked")
	other := f.assign("k8s-pod-network.other", "other")

	wantAll(t, "check", f.mustRun("check"), "No IPAM problems found", "2 unused allocation(s) younger than 10m0s")
	out, err := f.run("check", "--grace", "0s")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !ee.Silent() {
		t.Errorf("check with problems: %v, want exit status 1, already reported", err)
	}
	wantAll(t, "check --grace 0s", out, "2 IPAM problem(s)", "Leaked addresses", leaked.String(), other.String(), "no workload endpoint uses handle")

	out, err = f.run("release", "--ip", live.String())
	if err == nil || !strings.Contains(err.Error(), "refusing") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("release of a live address: %v\n%s", err, out)
	}
	wantAll(t, "release", f.mustRun("release", "--ip", other.String()), "Released "+other.String())
	wantAll(t, "release again", f.mustRun("release", "--ip", other.String()), "not allocated; nothing to release")

	wantAll(t, "gc", f.mustRun("gc"), "Nothing to clean up", "younger than the grace period")
	wantAll(t, "gc --grace 0s", f.mustRun("gc", "--grace", "0s"), "Released leaked addresses (1): "+leaked.String())
	wantAll(t, "check after gc", f.mustRun("check", "--grace", "0s"), "No IPAM problems found")

	wantAll(t, "release --force", f.mustRun("release", "--ip", live.String(), "--force"), "Released "+live.String())
	if _, err := f.run("release"); err == nil {
		t.Error("release without --ip succeeded")
	}
}

// TestCheckReportsDatastoreIdentity: a datastore whose cluster identity is
// gone (wiped or replaced) or that is marked not ready is a problem.
func TestCheckReportsDatastoreIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mustRun("check")
	if _, err := f.ds.SetDatastoreReady(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	out, err := f.run("check")
	if code := exitCode(err); code != 1 || !strings.Contains(out, "marked not ready") {
		t.Errorf("not ready: exit %d\n%s", code, out)
	}
	if _, err := f.ds.Etcd().Delete(context.Background(), datastore.ClusterInfoKey); err != nil {
		t.Fatal(err)
	}
	out, err = f.run("check")
	if code := exitCode(err); code != 1 || !strings.Contains(out, "no cluster identity") {
		t.Errorf("identity gone: exit %d\n%s", code, out)
	}
}

func exitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestCheckNamesEachProblemWithAHint: a leak, an address two endpoints
// name (one of which IPAM does not hold it for) and a block left outside
// every pool; check lists each with the addresses involved and a line
// saying what to do, and exits 1.
func TestCheckNamesEachProblemWithAHint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaked := f.assign("k8s-pod-network.leaked", "leaked")
	shared := f.assign("k8s-pod-network.a", "a")
	f.wep("a", "k8s-pod-network.a", shared)
	f.wep("b", "k8s-pod-network.b", shared)
	f.apply(&api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: "gone"}, Spec: api.IPPoolSpec{CIDR: "10.245.0.0/24", BlockSize: 26}})
	orphan, err := f.c.AutoAssign(context.Background(), ipam.AssignArgs{Node: "n1", HandleID: "k8s-pod-network.c", Pools: []string{"gone"}})
	if err != nil {
		t.Fatal(err)
	}
	f.wep("c", "k8s-pod-network.c", orphan[0])
	if err := f.c.DeletePool(context.Background(), "gone", true); err != nil {
		t.Fatal(err)
	}

	out, err := f.run("check", "--grace", "0s")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("check with problems: %v, want exit status 1", err)
	}
	wantAll(t, "check", out,
		"Leaked addresses", leaked.String(), "ipam gc` frees them",
		"Addresses named by more than one endpoint", shared.String(), "recreate all but the one",
		"Endpoints whose address IPAM does not hold for them", `allocated to handle "k8s-pod-network.a"`, "routedctl delete workloadendpoint",
		"Blocks outside every pool", netip.PrefixFrom(orphan[0], 26).Masked().String(), "recreate the pool as it was")
	sections := strings.Count(out, ":\n") - 1 // the summary line ends in ":" too
	if hints := strings.Count(out, "  Fix: "); hints != sections || sections < 4 {
		t.Errorf("%d sections but %d hints:\n%s", sections, hints, out)
	}
}
