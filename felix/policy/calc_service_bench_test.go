package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// BenchmarkServiceRules measures, in a netns with real nftables, the
// programming benchmark's cluster (BenchmarkProgramming's model, 2,000
// endpoints by default) with 500 Service-rule policies added (each
// naming its own Service of 20 endpoints in an egress destination and
// an ingress source, selecting an app with local pods, so every one is
// active): the full program, then per sample one Service's endpoints
// changing (one address replaced) until the kernel has it, beside a
// remote pod added, wall time and CPU, and the transactions each took.
// Run: go test -run XXX -bench ServiceRules -benchtime 1x ./felix/policy
// (POLICY_BENCH_EPS, _SERVICES, _SAMPLES change the shape).
func BenchmarkServiceRules(b *testing.B) {
	bm := benchModel{nEP: envInt("POLICY_BENCH_EPS", 2000), nLocal: 200, nPol: 1000}
	nSvc := envInt("POLICY_BENCH_SERVICES", 500)
	samples := envInt("POLICY_BENCH_SAMPLES", 200)
	svc := func(i, gen int) *api.ServiceEndpoints {
		sub := api.ServiceSubset{Ports: []api.ServicePort{{Protocol: api.Protocol{Name: "TCP"}, Port: 8080}, {Protocol: api.Protocol{Name: "UDP"}, Port: 53}}}
		for j := range 20 {
			last := 0
			if j == 19 {
				last = gen % 2 * 100
			}
			sub.Addresses = append(sub.Addresses, netip.AddrFrom4([4]byte{10, 200 + byte(i>>8), byte(i), byte(j + last)}).String())
		}
		return &api.ServiceEndpoints{Metadata: api.ObjectMeta{Name: "svc-" + strconv.Itoa(i), Namespace: "ns-" + strconv.Itoa(i%50)},
			Spec: api.ServiceEndpointsSpec{Subsets: []api.ServiceSubset{sub}}}
	}
	for range b.N {
		n := nstest.New(b)
		f, err := os.Open(n.Path())
		if err != nil {
			b.Fatal(err)
		}
		m, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: int(f.Fd())}})
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
				Spec: api.ProfileSpec{Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}}}}); err != nil {
				b.Fatal(err)
			}
		}
		for i := range bm.nPol {
			if err := m.SetPolicy(bm.policy(i, 8080)); err != nil {
				b.Fatal(err)
			}
		}
		for i := range nSvc {
			d, err := api.Decode(fmt.Appendf(nil, `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: svc-%d, namespace: ns-%d}
spec:
  order: %d
  selector: app == 'app-%d'
  types: [Ingress, Egress]
  ingress: [{action: Allow, source: {services: {name: svc-%d}}}]
  egress: [{action: Allow, protocol: TCP, destination: {services: {name: svc-%d}}}]
`, i, i%50, 2000+i, i%benchApps, i, i))
			if err != nil {
				b.Fatal(err)
			}
			if err := m.SetPolicy(d.Resources[0].(api.Policy)); err != nil {
				b.Fatal(err)
			}
			if err := m.SetServiceEndpoints(svc(i, 0)); err != nil {
				b.Fatal(err)
			}
		}
		for i := range bm.nEP {
			if err := m.SetEndpoint(bm.endpoint(i)); err != nil {
				b.Fatal(err)
			}
		}
		apply()
		b.Logf("full program: %d policies + %d Service-rule policies, %d endpoints (%d local): %v, %d transactions",
			bm.nPol, nSvc, bm.nEP, bm.nLocal, time.Since(t0).Round(time.Millisecond), m.Writes())

		var svcWall, podWall []time.Duration
		var svcCPU, podCPU time.Duration
		svcTx, podTx := 0, 0
		timed := func(change func(), wall *[]time.Duration, cpu *time.Duration, tx *int) {
			w, t, c := m.Writes(), time.Now(), cpuTime()
			change()
			apply()
			*wall = append(*wall, time.Since(t))
			*cpu += cpuTime() - c
			*tx += m.Writes() - w
		}
		for k := range samples {
			i := k % nSvc
			timed(func() {
				if err := m.SetServiceEndpoints(svc(i, k/nSvc+1)); err != nil {
					b.Fatal(err)
				}
			}, &svcWall, &svcCPU, &svcTx)
			timed(func() {
				if err := m.SetEndpoint(bm.endpoint(bm.nEP + k)); err != nil {
					b.Fatal(err)
				}
			}, &podWall, &podCPU, &podTx)
		}
		for _, r := range []struct {
			what string
			wall []time.Duration
			cpu  time.Duration
			tx   int
		}{{"a Service's endpoints changed", svcWall, svcCPU, svcTx}, {"a pod added elsewhere", podWall, podCPU, podTx}} {
			b.Logf("%s: p50 %v p99 %v, mean CPU %v, %.1f transactions", r.what, percentile(r.wall, 0.5).Round(10*time.Microsecond),
				percentile(r.wall, 0.99).Round(10*time.Microsecond), (r.cpu / time.Duration(samples)).Round(10*time.Microsecond), float64(r.tx)/float64(samples))
		}
		b.ReportMetric(float64(percentile(svcWall, 0.5).Microseconds()), "svc-p50-us")
		m.Close()
		f.Close()
	}
}
