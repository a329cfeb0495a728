package cni_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/routed-net/routed/tests/lab"
)

// BenchmarkAddDel measures ADD and DEL latency of routed-cni side by side
// with the reference ptp + host-local plugins, in the same run on the
// same machine, sequentially and with 8 attachments in flight, against
// etcd as the manifests deploy it (fsync on, TLS with client
// certificates). Runs alternate between the columns so drift hits all
// alike. Each b.N iteration is a full measurement (make bench uses
// -benchtime 1x); ratios are against the reference.
//
// Two variants:
//   - routed-ipam, the production setup, in two columns: "daemon", through
//     routed's CNI socket (one etcd transaction per ADD and per DEL, no
//     etcd connection in the plugin), and "direct", routed's socket
//     absent (routed stopped: the plugin dials etcd over TLS and does the
//     IPAM and endpoint writes itself under the host lock);
//   - host-local: routed-cni's own cost (the veth work plus the endpoint
//     write, direct).
//
// The direct column's sequential calls are broken down by step from the
// plugins' debug log (reportSteps: direct-<verb>-<thin|full>-<step>-ms).
func BenchmarkAddDel(b *testing.B) {
	b.Run("routed-ipam", func(b *testing.B) {
		n := newDurableTLSNode(b)
		n.createPool(b, "bench", "10.96.0.0/16", 26)
		n.startDaemon(b)
		direct := n.routedIPAMConf(nil)
		direct["routed_socket"] = filepath.Join(n.ipamDir, "stopped", "cni.sock")
		cols := []column{
			{"daemon", confList(b, "routed-net", "1.1.0", n.routedIPAMConf(nil))},
			{"direct", confList(b, "routed-net", "1.1.0", direct)},
		}
		seqLog := benchAddDel(b, n, cols)
		reportSteps(b, seqLog)
		for _, c := range cols {
			reportRequests(b, n, c, newPod(b, "count-"+c.name))
		}
	})
	b.Run("host-local", func(b *testing.B) {
		n := newDurableTLSNode(b)
		benchAddDel(b, n, []column{{"routed", confList(b, "routed-net", "1.1.0", n.routedConf("10.98.0.0/16"))}})
	})
}

// column is one configuration measured beside the reference.
type column struct {
	name string
	conf *libcni.NetworkConfigList
}

// benchAddDel measures cols beside the reference and returns what the
// plugins logged during the last sequential measurement.
func benchAddDel(b *testing.B, n *node, cols []column) (seqLog string) {
	ref := column{"ref", confList(b, "ref-net", "1.1.0", netconf{
		"type": "ptp",
		"ipam": map[string]any{"type": "host-local", "subnet": "10.97.0.0/16", "dataDir": n.ipamDir},
	})}
	all := append(slices.Clone(cols), ref)
	// 200 samples per figure: enough to call the 99th percentile one.
	const seqRuns, parWorkers, parRuns = 200, 8, 25
	pods := make([]*pod, parWorkers)
	for i := range pods {
		pods[i] = newPod(b, fmt.Sprintf("bench-%d", i))
	}
	// Warm up every column (page cache, etcd block claim).
	for range 3 {
		for _, c := range all {
			n.cycle(b, c.conf, pods[0], 0)
		}
	}
	b.ResetTimer()
	for range b.N {
		adds, dels := map[string][]time.Duration{}, map[string][]time.Duration{}
		mark := n.logMark(b)
		for i := range seqRuns {
			for _, c := range all {
				a, d := n.cycle(b, c.conf, pods[0], i)
				adds[c.name], dels[c.name] = append(adds[c.name], a), append(dels[c.name], d)
			}
		}
		seqLog = n.logSince(b, mark)
		report(b, "seq", cols, adds, dels)

		adds, dels = map[string][]time.Duration{}, map[string][]time.Duration{}
		for _, c := range all {
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range parWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range parRuns {
						a, d := n.cycle(b, c.conf, pods[w], i)
						mu.Lock()
						adds[c.name], dels[c.name] = append(adds[c.name], a), append(dels[c.name], d)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		report(b, "par8", cols, adds, dels)
	}
	b.StopTimer()
	return seqLog
}

// reportRequests counts, from etcd's own metrics, the requests one
// exec'd ADD and one DEL of column c make.
func reportRequests(b *testing.B, n *node, c column, p *pod) {
	const runs = 20
	ctx := context.Background()
	url := n.etcd[0] + "/metrics"
	client := n.metricsClient()
	read := func() lab.EtcdCounters {
		c, err := lab.ReadEtcdCounters(ctx, client, url)
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
		if _, err := n.add(c.conf, rt); err != nil {
			b.Fatal(err)
		}
		c1 := read()
		if err := n.del(c.conf, rt); err != nil {
			b.Fatal(err)
		}
		c2 := read()
		add.Unary += c1.Unary - c0.Unary
		del.Unary += c2.Unary - c1.Unary
		addTxn += c1.ByMethod["Txn"] - c0.ByMethod["Txn"]
		delTxn += c2.ByMethod["Txn"] - c1.ByMethod["Txn"]
	}
	b.ReportMetric(add.Unary/runs, "etcd-requests/add-"+c.name)
	b.ReportMetric(addTxn/runs, "etcd-txns/add-"+c.name)
	b.ReportMetric(del.Unary/runs, "etcd-requests/del-"+c.name)
	b.ReportMetric(delTxn/runs, "etcd-txns/del-"+c.name)
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

// report gives each column's p50 and p99 in ms, the reference's, each
// column's ratio to the reference and, with daemon and direct columns,
// daemon/direct.
func report(b *testing.B, mode string, cols []column, adds, dels map[string][]time.Duration) {
	for _, m := range []struct {
		name string
		d    map[string][]time.Duration
	}{{"add", adds}, {"del", dels}} {
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.5}, {"p99", 0.99}} {
			prefix := fmt.Sprintf("%s-%s-%s-", mode, m.name, q.name)
			ref := pct(m.d["ref"], q.p)
			b.ReportMetric(ref, prefix+"ref-ms")
			for _, c := range cols {
				v := pct(m.d[c.name], q.p)
				b.ReportMetric(v, prefix+c.name+"-ms")
				b.ReportMetric(v/ref, prefix+c.name+"/ref")
			}
			if _, ok := m.d["direct"]; ok {
				b.ReportMetric(pct(m.d["daemon"], q.p)/pct(m.d["direct"], q.p), prefix+"daemon/direct")
			}
		}
	}
}
