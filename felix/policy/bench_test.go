package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// benchModel is the synthetic cluster of BenchmarkProgramming: nEP
// endpoints over 50 namespaces and 200 apps, nLocal of them on this
// node (one of each app first, so every policy is active), and nPol
// policies in the default tier, each selecting one app and allowing TCP
// 8080 and the named port "http" from another app, every tenth from a
// whole namespace instead, and DNS egress to the dns pods.
type benchModel struct {
	nEP, nLocal, nPol int
	dual              bool // IPv6 addresses too
	// nHosts host endpoints (POLICY_BENCH_HOSTS): one of this node's
	// ("*"), the others elsewhere, each labelled like an app's pods so
	// that the policies' source sets hold their addresses, and one
	// policy selecting them all (role == 'host').
	nHosts int
}

// hostEndpoint is the i-th host endpoint of the model.
func (bm benchModel) hostEndpoint(i int) (*api.HostEndpoint, bool) {
	iface := "eth0"
	if i == 0 {
		iface = "*"
	}
	return &api.HostEndpoint{Metadata: api.ObjectMeta{Name: fmt.Sprintf("node%d-eth0", i),
		Labels: map[string]string{"app": "app-" + strconv.Itoa(i%benchApps), "role": "host"}},
		Spec: api.HostEndpointSpec{Node: fmt.Sprintf("node%d", i), InterfaceName: iface, Profiles: []string{api.DefaultAllowProfile},
			ExpectedIPs: []string{netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)}).String()}}}, i == 0
}

const benchApps = 200

func (bm benchModel) endpoint(i int) policy.Endpoint {
	ep := bm.endpoint4(i)
	if bm.dual {
		a := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x64, 14: byte(i >> 8), 15: byte(i)})
		ep.IPs = append(ep.IPs, netip.PrefixFrom(a, 128))
	}
	return ep
}

func (bm benchModel) endpoint4(i int) policy.Endpoint {
	ns := "ns-" + strconv.Itoa(i%50)
	labels := map[string]string{"app": "app-" + strconv.Itoa(i%benchApps)}
	if i%100 == 7 {
		labels["role"] = "dns"
	}
	return policy.Endpoint{
		Key: fmt.Sprintf("node-k8s-%s-pod%d-eth0", ns, i), Iface: fmt.Sprintf("cali%011x", i), Local: i < bm.nLocal,
		Namespace: ns, Labels: labels, Profiles: []string{"kns." + ns},
		IPs:   []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(64 + i>>16), byte(i >> 8), byte(i)}), 32)},
		Ports: []policy.NamedPort{{Name: "http", Proto: 6, Port: 8080}},
	}
}

func (bm benchModel) policy(i, port int) api.Policy {
	src := fmt.Sprintf("{selector: app == 'app-%d'}", (i*7+3)%benchApps)
	if i%10 == 0 {
		src = fmt.Sprintf("{namespaceSelector: projectcalico.org/name == 'ns-%d'}", i%50)
	}
	y := fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: pol-%d}
spec:
  order: %d
  selector: app == 'app-%d'
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: TCP, source: %s, destination: {ports: [%d, http]}}]
  egress: [{action: Allow, protocol: UDP, destination: {selector: role == 'dns', ports: [53]}}, {action: Allow, protocol: TCP}]
`, i, i, i%benchApps, src, port)
	d, err := api.Decode([]byte(y))
	if err != nil {
		panic(err)
	}
	return d.Resources[0].(api.Policy)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// cpuTime is the CPU time the process has used, user and system (the
// kernel's side of a netlink transaction runs in the sender's system
// time), so that per-operation cost can be told apart from waiting for
// a CPU on a loaded machine.
func cpuTime() time.Duration {
	u, s := cpuUserSys()
	return u + s
}

// cpuUserSys is the process's user and system CPU time apart: system
// time is mostly the kernel committing transactions (validation
// included), user time the calculator, rendering and the netlink
// library.
func cpuUserSys() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkProgramming measures, in a netns with real nftables: the
// full program of 1,000 policies over 10,000 endpoints, a no-op resync,
// one pod added until its memberships (and, if local, its chains and
// dispatch entry) are in the kernel, and one policy edit until enforced.
// Run: go test -run XXX -bench Programming -benchtime 1x ./felix/policy
// (POLICY_BENCH_EPS, _LOCAL, _POLICIES, _SAMPLES change the shape;
// POLICY_BENCH_DUAL=1 gives every endpoint an IPv6 address too;
// POLICY_BENCH_HOSTS=100 adds 100 host endpoints, one of them local;
// POLICY_BENCH_FLOWS=1 turns flow marks on).
func BenchmarkProgramming(b *testing.B) {
	bm := benchModel{nEP: envInt("POLICY_BENCH_EPS", 10000), nLocal: envInt("POLICY_BENCH_LOCAL", 200), nPol: envInt("POLICY_BENCH_POLICIES", 1000),
		dual: os.Getenv("POLICY_BENCH_DUAL") == "1", nHosts: envInt("POLICY_BENCH_HOSTS", 0)}
	samples := envInt("POLICY_BENCH_SAMPLES", 200)
	for range b.N {
		n := nstest.New(b)
		f, err := os.Open(n.Path())
		if err != nil {
			b.Fatal(err)
		}
		cfg := policy.Config{Dataplane: nftdp.Config{NetnsFd: int(f.Fd())}}
		if os.Getenv("POLICY_BENCH_FLOWS") == "1" {
			cfg.Log.FlowGroup = 8 // every deciding rule with its flow mark (docs/flows.md)
		}
		m, err := policy.NewManager(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		apply := func() {
			if err := m.Apply(ctx); err != nil {
				b.Fatal(err)
			}
		}

		t0 := time.Now()
		for k := range 50 {
			if err := m.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: "kns.ns-" + strconv.Itoa(k)},
				Spec: api.ProfileSpec{LabelsToApply: map[string]string{"pcns.team": "t" + strconv.Itoa(k%5)},
					Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}}}}); err != nil {
				b.Fatal(err)
			}
		}
		for i := range bm.nPol {
			if err := m.SetPolicy(bm.policy(i, 8080)); err != nil {
				b.Fatal(err)
			}
		}
		for i := range bm.nEP {
			if err := m.SetEndpoint(bm.endpoint(i)); err != nil {
				b.Fatal(err)
			}
		}
		if bm.nHosts > 0 {
			if err := m.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: api.DefaultAllowProfile},
				Spec: api.ProfileSpec{Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}}}}); err != nil {
				b.Fatal(err)
			}
			d, err := api.Decode([]byte("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: hosts}\nspec:\n  order: 10\n  selector: role == 'host'\n" +
				"  applyOnForward: true\n  ingress: [{action: Allow, protocol: TCP, source: {selector: role == 'host'}, destination: {ports: [22, 179, 10250]}}]\n"))
			if err != nil {
				b.Fatal(err)
			}
			if err := m.SetPolicy(d.Resources[0].(api.Policy)); err != nil {
				b.Fatal(err)
			}
		}
		for i := range bm.nHosts {
			h, local := bm.hostEndpoint(i)
			if err := m.SetHostEndpoint(h, local, ""); err != nil {
				b.Fatal(err)
			}
		}
		calc := time.Since(t0)
		t1 := time.Now()
		apply()
		full := time.Since(t1)
		b.Logf("full program: %d policies, %d endpoints (%d local, dual-stack %v), %d host endpoints: calc %v, kernel %v, total %v, %d transactions",
			bm.nPol, bm.nEP, bm.nLocal, bm.dual, bm.nHosts, calc.Round(time.Millisecond), full.Round(time.Millisecond), (calc + full).Round(time.Millisecond), m.Writes())
		b.ReportMetric(float64((calc + full).Milliseconds()), "full-ms")

		w := m.Writes()
		t2, c2 := time.Now(), cpuTime()
		if err := m.Resync(ctx); err != nil {
			b.Fatal(err)
		}
		resync := time.Since(t2)
		b.Logf("no-op resync: %v (CPU %v), %d writes", resync.Round(time.Millisecond), (cpuTime() - c2).Round(time.Millisecond), m.Writes()-w)
		b.ReportMetric(float64(resync.Milliseconds()), "resync-ms")
		if m.Writes() != w {
			b.Errorf("no-op resync wrote %d transactions", m.Writes()-w)
		}
		t3, c3 := time.Now(), cpuTime()
		cs, err := m.Counters()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("counter read: %v (CPU %v), %d rule IDs", time.Since(t3).Round(time.Millisecond), (cpuTime() - c3).Round(time.Millisecond), len(cs))
		b.ReportMetric(float64(time.Since(t3).Milliseconds()), "counters-ms")

		// Each sample: the model change (calc) and the transaction that
		// programs it (kernel), timed separately and together.
		var remote, local, first, edit, added, remoteK, localK, firstK, editK, addedK []time.Duration
		// A new service account's profile arrives before its first pod:
		// the calculator's cost of that event (no transaction of its own).
		var profileCPU time.Duration
		// CPU time of each kind's samples, user and system, summed
		// (rusage is too coarse for one sample).
		cpuU, cpuS := map[*[]time.Duration]time.Duration{}, map[*[]time.Duration]time.Duration{}
		txns := map[*[]time.Duration]int{}
		timed := func(change func() error, total, kernel *[]time.Duration) {
			w0 := m.Writes()
			t := time.Now()
			u, s := cpuUserSys()
			if err := change(); err != nil {
				b.Fatal(err)
			}
			tk := time.Now()
			apply()
			*kernel = append(*kernel, time.Since(tk))
			*total = append(*total, time.Since(t))
			u2, s2 := cpuUserSys()
			cpuU[total] += u2 - u
			cpuS[total] += s2 - s
			txns[total] += m.Writes() - w0
		}
		for s := range samples {
			e := bm.endpoint(bm.nEP + s)
			switch s % 3 {
			case 0:
				timed(func() error { return m.SetEndpoint(e) }, &remote, &remoteK)
			case 1: // like the local pods already there (another replica)
				e.Local = true
				timed(func() error { return m.SetEndpoint(e) }, &local, &localK)
			case 2: // the first local pod with its set of policies and profiles
				e.Local = true
				e.Profiles = append(e.Profiles, "ksa."+e.Namespace+".sa"+strconv.Itoa(s))
				c := cpuTime()
				if err := m.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: e.Profiles[1]},
					Spec: api.ProfileSpec{Egress: []api.Rule{{Action: api.ActionAllow}}}}); err != nil {
					b.Fatal(err)
				}
				profileCPU += cpuTime() - c
				timed(func() error { return m.SetEndpoint(e) }, &first, &firstK)
			}
		}
		for s := range samples {
			// Decoding the YAML is the feed's work, not programming.
			// Every edit changes its policy's port: a policy edited a
			// second time (after nPol/5 edits) gets the other one.
			p := bm.policy(s*5%bm.nPol, 8081+(s*5/bm.nPol)%2)
			timed(func() error { return m.SetPolicy(p) }, &edit, &editK)
		}
		// New policies, each selecting pods of an app with local pods and
		// allowing from a selector no other rule uses: a new set, filled
		// from the endpoints it selects.
		for s := range samples / 3 {
			src := fmt.Sprintf("app == 'app-%d' && sample != '%d'", (s*13+5)%benchApps, s)
			y := fmt.Sprintf("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: new-%d}\nspec:\n  order: 5000\n  selector: app == 'app-%d'\n"+
				"  types: [Ingress]\n  ingress: [{action: Allow, protocol: TCP, source: {selector: \"%s\"}, destination: {ports: [9000]}}]\n", s, s%benchApps, src)
			d, err := api.Decode([]byte(y))
			if err != nil {
				b.Fatal(err)
			}
			p := d.Resources[0].(api.Policy)
			timed(func() error { return m.SetPolicy(p) }, &added, &addedK)
		}
		b.Logf("profile added (calculator only, before its first pod): mean CPU %v (%d samples)", (profileCPU / time.Duration(max(1, len(first)))).Round(10*time.Microsecond), len(first))
		r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
		for _, x := range []struct {
			name      string
			ds, kernl *[]time.Duration
		}{{"pod added elsewhere (set members)", &remote, &remoteK}, {"local pod added, like others (+ dispatch)", &local, &localK},
			{"local pod added, first of its kind (+ its chains)", &first, &firstK}, {"policy edited", &edit, &editK},
			{"policy added (+ a new set, its chain, its pods' chains)", &added, &addedK}} {
			ds, kernl := *x.ds, *x.kernl
			n := time.Duration(len(ds))
			b.Logf("%s: p50 %v p99 %v max %v (kernel transaction p50 %v p99 %v; mean CPU %v = user %v + sys %v; %.2f transactions each; %d samples)", x.name, r(percentile(ds, 0.5)),
				r(percentile(ds, 0.99)), r(slices.Max(ds)), r(percentile(kernl, 0.5)), r(percentile(kernl, 0.99)),
				r((cpuU[x.ds]+cpuS[x.ds])/n), r(cpuU[x.ds]/n), r(cpuS[x.ds]/n), float64(txns[x.ds])/float64(len(ds)), len(ds))
		}
		// Everything the samples changed is in the kernel as wanted.
		w = m.Writes()
		if err := m.Resync(ctx); err != nil {
			b.Fatal(err)
		}
		if m.Writes() != w {
			b.Errorf("resync after the samples wrote %d transactions", m.Writes()-w)
		}
		b.ReportMetric(float64(percentile(local, 0.99).Microseconds())/1000, "pod-add-p99-ms")
		b.ReportMetric(float64(percentile(edit, 0.99).Microseconds())/1000, "policy-edit-p99-ms")
		m.Close()
		f.Close()
	}
}

func init() {
	if os.Getenv("NFTDP_DEBUG") != "" {
		logrus.SetLevel(logrus.DebugLevel)
	}
}
