package cni_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/tests/lab"
)

// BenchmarkAddDel measures ADD and DEL latency of routed-cni with
// routed-ipam (datastore IPAM plus the WorkloadEndpoint write, against an
// embedded etcd with fsync on) side by side with the reference ptp + host-local
// plugins, in the same run on the same machine, sequentially and with 8
// attachments in flight. Runs alternate between the two so drift hits
// both alike. Each b.N iteration is a full measurement (make bench uses
// -benchtime 1x); the ratios are routed / reference.
//
// Two variants: routed-ipam (the production setup: two processes that
// each load the etcd client) and host-local (routed-cni's own cost: the
// veth work plus the endpoint write).
func BenchmarkAddDel(b *testing.B) {
	b.Run("routed-ipam", func(b *testing.B) { benchAddDel(b, true) })
	b.Run("host-local", func(b *testing.B) { benchAddDel(b, false) })
}

func benchAddDel(b *testing.B, routedIPAM bool) {
	n := newNodeWith(b, etcdtest.StartDurable) // fsync on, as in production
	n.createPool(b, "bench", "10.96.0.0/16", 26)
	rc := n.routedIPAMConf(nil)
	if !routedIPAM {
		rc = n.routedConf("10.98.0.0/16")
	}
	routed := confList(b, "routed-net", "1.1.0", rc)
	ref := confList(b, "ref-net", "1.1.0", netconf{
		"type": "ptp",
		"ipam": map[string]any{"type": "host-local", "subnet": "10.97.0.0/16", "dataDir": n.ipamDir},
	})
	// 200 samples per figure: enough to call the 99th percentile one.
	const seqRuns, parWorkers, parRuns = 200, 8, 25
	pods := make([]*pod, parWorkers)
	for i := range pods {
		pods[i] = newPod(b, fmt.Sprintf("bench-%d", i))
	}
	// Warm up both (page cache, etcd block claim).
	for range 3 {
		n.cycle(b, routed, pods[0], 0)
		n.cycle(b, ref, pods[0], 0)
	}
	b.ResetTimer()
	for range b.N {
		var rAdd, rDel, fAdd, fDel []time.Duration
		for i := range seqRuns {
			a, d := n.cycle(b, routed, pods[0], i)
			rAdd, rDel = append(rAdd, a), append(rDel, d)
			a, d = n.cycle(b, ref, pods[0], i)
			fAdd, fDel = append(fAdd, a), append(fDel, d)
		}
		report(b, "seq", rAdd, rDel, fAdd, fDel)

		par := func(l *libcni.NetworkConfigList) (adds, dels []time.Duration) {
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range parWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range parRuns {
						a, d := n.cycle(b, l, pods[w], i)
						mu.Lock()
						adds, dels = append(adds, a), append(dels, d)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			return adds, dels
		}
		rAdd, rDel = par(routed)
		fAdd, fDel = par(ref)
		report(b, "par8", rAdd, rDel, fAdd, fDel)
	}
	b.StopTimer()
	if routedIPAM {
		reportRequests(b, n, routed, pods[0])
	}
}

// reportRequests counts, from etcd's own metrics, the requests one
// exec'd ADD and one DEL make: each is a cold process with no cache.
func reportRequests(b *testing.B, n *node, l *libcni.NetworkConfigList, p *pod) {
	const runs = 20
	ctx := context.Background()
	url := n.etcd[0] + "/metrics"
	read := func() lab.EtcdCounters {
		c, err := lab.ReadEtcdCounters(ctx, http.DefaultClient, url)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	var add, del lab.EtcdCounters
	var addTxn, delTxn float64
	for i := range runs {
		rt := p.rt()
		rt.ContainerID = fmt.Sprintf("%scount%02d", p.containerID[:12], i)
		c0 := read()
		if _, err := n.add(l, rt); err != nil {
			b.Fatal(err)
		}
		c1 := read()
		if err := n.del(l, rt); err != nil {
			b.Fatal(err)
		}
		c2 := read()
		add.Unary += c1.Unary - c0.Unary
		del.Unary += c2.Unary - c1.Unary
		addTxn += c1.ByMethod["Txn"] - c0.ByMethod["Txn"]
		delTxn += c2.ByMethod["Txn"] - c1.ByMethod["Txn"]
	}
	b.ReportMetric(add.Unary/runs, "etcd-requests/add")
	b.ReportMetric(addTxn/runs, "etcd-txns/add")
	b.ReportMetric(del.Unary/runs, "etcd-requests/del")
	b.ReportMetric(delTxn/runs, "etcd-txns/del")
}

// cycle adds and deletes one attachment and times both.
func (n *node) cycle(b *testing.B, l *libcni.NetworkConfigList, p *pod, i int) (add, del time.Duration) {
	rt := p.rt()
	rt.ContainerID = fmt.Sprintf("%s%04d", p.containerID[:12], i)
	t0 := time.Now()
	if _, err := n.add(l, rt); err != nil {
		b.Fatalf("%s ADD: %v\n%s", l.Plugins[0].Network.Type, err, n.logTail())
	}
	t1 := time.Now()
	if err := n.del(l, rt); err != nil {
		b.Fatalf("%s DEL: %v", l.Plugins[0].Network.Type, err)
	}
	return t1.Sub(t0), time.Since(t1)
}

// pct is the nearest-rank percentile in ms; callers pass p99 only with
// at least 200 samples.
func pct(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(max(int(math.Ceil(p*float64(len(s))))-1, 0), len(s)-1)
	return float64(s[i].Microseconds()) / 1000
}

func report(b *testing.B, mode string, rAdd, rDel, fAdd, fDel []time.Duration) {
	for _, m := range []struct {
		name string
		r, f []time.Duration
	}{{"add", rAdd, fAdd}, {"del", rDel, fDel}} {
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.5}, {"p99", 0.99}} {
			r, f := pct(m.r, q.p), pct(m.f, q.p)
			b.ReportMetric(r, fmt.Sprintf("%s-%s-%s-routed-ms", mode, m.name, q.name))
			b.ReportMetric(f, fmt.Sprintf("%s-%s-%s-ref-ms", mode, m.name, q.name))
			b.ReportMetric(r/f, fmt.Sprintf("%s-%s-%s-ratio", mode, m.name, q.name))
		}
	}
}
