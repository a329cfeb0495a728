package flowagg_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

const testToken = "reader-token-0123456789"

// aggregator runs a Server on Run's listener (flowagg.TLSListener) at
// addr ("" for any port) and returns its base URL; cancel stops it.
type aggregator struct {
	url    string
	addr   string
	srv    *flowagg.Server
	cancel context.CancelFunc
	done   chan error
}

func startAggregator(t *testing.T, pki testpki.PKI, addr string) *aggregator {
	t.Helper()
	return startAggregatorWith(t, pki, addr, nil)
}

// startAggregatorWith is startAggregator with the configuration changed
// by edit.
func startAggregatorWith(t *testing.T, pki testpki.PKI, addr string, edit func(*flowagg.Config)) *aggregator {
	t.Helper()
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := flowagg.Config{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CAFile, TokenFile: tokFile}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := flowagg.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := srv.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	testenv.Eventually(t, 5*time.Second, 50*time.Millisecond, func() string {
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Sprintf("listening on %s (the previous server's port is being released): %v", addr, err)
		}
		return ""
	})
	ctx, cancel := context.WithCancel(context.Background())
	a := &aggregator{url: "https://" + ln.Addr().String(), addr: ln.Addr().String(), srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- srv.Serve(ctx, flowagg.TLSListener(ln, tc)) }()
	t.Cleanup(a.stop)
	return a
}

func (a *aggregator) stop() {
	if a.cancel != nil {
		a.cancel()
		<-a.done
		a.cancel = nil
	}
}

// caPool holds the test CA.
func caPool(t *testing.T, pki testpki.PKI) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

// client is an HTTPS client trusting the test CA, with a client
// certificate when cert is given.
func client(t *testing.T, pki testpki.PKI, cert, key string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: caPool(t, pki)}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

func batch(node, boot string, seq uint64, flows ...flowrec.Flow) flowrec.Batch {
	now := time.Now()
	return flowrec.Batch{Node: node, Boot: boot, Seq: seq, Start: now.Add(-3 * time.Second), End: now, Flows: flows}
}

func deniedFlow(port uint16) flowrec.Flow {
	return flowrec.Flow{End: time.Now(), Src: flowrec.End{Addr: "10.65.0.1", Kind: flowrec.EndPod, Namespace: "prod", Name: "a"},
		Dst: flowrec.End{Addr: "10.65.0.2", Kind: flowrec.EndPod, Namespace: "prod", Name: "b"}, Proto: "TCP", DstPort: port, Verdict: flowrec.Deny, Denied: 1,
		Ingress: &flowrec.Trace{Verdict: flowrec.Deny, Steps: []policy.RuleInfo{{ID: "pi-np:prod/web/1", Kind: policy.KindPolicyRule, Tier: "default", Policy: "np:prod/web", Direction: "ingress", Index: 1, Action: "Deny"}}}}
}

func allowedFlow(port uint16) flowrec.Flow {
	f := deniedFlow(port)
	f.Verdict, f.Denied, f.Started = flowrec.Allow, 0, 1
	f.Ingress = &flowrec.Trace{Verdict: flowrec.Allow, Steps: []policy.RuleInfo{{ID: "pri-kns.prod/0", Kind: policy.KindProfileRule, Profile: "kns.prod", Direction: "ingress", Action: "Allow"}}}
	return f
}

func post(t *testing.T, c *http.Client, url string, b flowrec.Batch) int {
	t.Helper()
	js, _ := json.Marshal(b)
	resp, err := c.Post(url+"/v1/nodes/"+b.Node+"/batches", "application/json", strings.NewReader(string(js)))
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// read returns the entries GET /v1/flows gives with the query.
func read(t *testing.T, c *http.Client, url, query string) []flowagg.Entry {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/flows?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/flows?%s: %s", query, resp.Status)
	}
	var out []flowagg.Entry
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e flowagg.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func flowsOf(es []flowagg.Entry) (flows []flowrec.Flow, gaps []flowagg.Gap) {
	for _, e := range es {
		if e.Flow != nil {
			flows = append(flows, *e.Flow)
		}
		if e.Gap != nil {
			gaps = append(gaps, *e.Gap)
		}
	}
	return flows, gaps
}

// TestAccess: batches need a client certificate of the cluster CA
// (and a per-node identity may send only its own node's), readers need
// the token; nothing is anonymous.
func TestAccess(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	shared, sharedKey := pki.IssueClient(t, "routed-node")
	own, ownKey := pki.IssueClient(t, "node-b")
	foreign := testpki.New(t)
	fc, fk := foreign.IssueClient(t, "routed-node")
	anon := client(t, pki, "", "")
	if code := post(t, anon, a.url, batch("node-a", "x", 1)); code != http.StatusUnauthorized {
		t.Errorf("a batch without a client certificate: %d, want 401", code)
	}
	if code := post(t, client(t, pki, fc, fk), a.url, batch("node-a", "x", 1)); code == http.StatusNoContent {
		t.Errorf("a batch with another CA's certificate was taken")
	}
	if code := post(t, client(t, pki, own, ownKey), a.url, batch("node-a", "x", 1)); code != http.StatusForbidden {
		t.Errorf("node-b's identity sending node-a's batch: %d, want 403", code)
	}
	if code := post(t, client(t, pki, own, ownKey), a.url, batch("node-b", "x", 1, deniedFlow(9090))); code != http.StatusNoContent {
		t.Errorf("node-b's own batch: %d", code)
	}
	if code := post(t, client(t, pki, shared, sharedKey), a.url, batch("node-a", "y", 1, allowedFlow(8080))); code != http.StatusNoContent {
		t.Errorf("routed-node's batch: %d", code)
	}
	for _, path := range []string{"/v1/flows", "/v1/flows?follow=1"} {
		resp, err := anon.Get(a.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %s", path, resp.Status)
		}
	}
	// The page without the token is only the sign-in form.
	resp, err := anon.Get(a.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
	resp.Body.Close()
	if !strings.Contains(sb.String(), `action="/login"`) || strings.Contains(sb.String(), "/v1/flows") {
		t.Errorf("the page without a token is not just the sign-in form")
	}
	fl, _ := flowsOf(read(t, anon, a.url, ""))
	if len(fl) != 2 {
		t.Errorf("the reader sees %d flows, want 2", len(fl))
	}
}

// TestFiltersAndGaps: filters by namespace, pod, verdict, policy, port
// and since; a node's restart (new boot), skipped sequence numbers and
// dropped records are gaps in the stream.
func TestFiltersAndGaps(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	c := client(t, pki, cert, key)
	for _, b := range []flowrec.Batch{
		batch("node-a", "boot1", 1, allowedFlow(8080), deniedFlow(9090)),
		batch("node-a", "boot1", 2, allowedFlow(8080)),
		batch("node-a", "boot1", 5, allowedFlow(8080)), // 3 and 4 lost
		batch("node-a", "boot2", 1, deniedFlow(9090)),  // routed restarted
	} {
		if code := post(t, c, a.url, b); code != http.StatusNoContent {
			t.Fatalf("batch %d: %d", b.Seq, code)
		}
	}
	d := batch("node-a", "boot2", 2)
	d.Dropped = map[string]uint64{flowrec.DropPending: 7}
	post(t, c, a.url, d)
	for q, want := range map[string]int{
		"": 5, "verdict=deny": 2, "verdict=allow": 3, "port=9090": 2, "namespace=prod": 5, "namespace=dev": 0,
		"pod=b": 5, "pod=prod/a": 5, "pod=c": 0, "policy=np:prod/web": 2, "policy=web": 2, "policy=kns.prod": 3,
		"since=1h": 5, "since=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339): 0,
	} {
		fl, _ := flowsOf(read(t, c, a.url, q))
		if len(fl) != want {
			t.Errorf("?%s: %d flows, want %d", q, len(fl), want)
		}
	}
	_, gaps := flowsOf(read(t, c, a.url, ""))
	reasons := map[string]int{}
	for _, g := range gaps {
		reasons[g.Reason]++
	}
	if reasons[flowagg.GapAggregator] != 1 || reasons[flowagg.GapMissing] != 1 || reasons[flowagg.GapRestarted] != 1 || reasons[flowagg.GapDropped] != 1 {
		t.Errorf("gaps: %+v", gaps)
	}
	for _, q := range []string{"verdict=maybe", "port=0", "port=x", "since=yesterday"} {
		req, _ := http.NewRequest("GET", a.url+"/v1/flows?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?%s: %s, want 400", q, resp.Status)
		}
	}
}

// TestSenderResumesAfterAggregatorRestart: a node's sender keeps its
// batches while the aggregator is down and delivers them, in order,
// to the one that comes back on the same address; the new aggregator
// says its window starts with it and that the node's earlier batches
// are not there.
func TestSenderResumesAfterAggregatorRestart(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	s := startSender(t, pki, a.url, "routed-node")
	reader := client(t, pki, "", "")
	s.Sink(batch("node-a", "boot1", 1, allowedFlow(1)))
	waitFlows(t, reader, a.url, "port=1", 1)
	a.stop()
	s.Sink(batch("node-a", "boot1", 2, allowedFlow(2)))
	s.Sink(batch("node-a", "boot1", 3, deniedFlow(3)))
	b := startAggregator(t, pki, a.addr)
	waitFlows(t, reader, b.url, "port=3", 1)
	fl, gaps := flowsOf(read(t, reader, b.url, ""))
	if len(fl) != 2 || fl[0].DstPort != 2 || fl[1].DstPort != 3 {
		t.Errorf("after the restart: %+v", fl)
	}
	if len(gaps) != 2 || gaps[0].Reason != flowagg.GapAggregator || gaps[1].Reason != flowagg.GapMissing || gaps[1].Node != "node-a" {
		t.Errorf("gaps after the restart: %+v", gaps)
	}
}

// startSender runs a node's Sender with a client certificate of cn
// until the test ends.
func startSender(t *testing.T, pki testpki.PKI, url, cn string) *flowagg.Sender {
	t.Helper()
	cert, key := pki.IssueClient(t, cn)
	s, err := flowagg.NewSender(flowagg.SenderConfig{URL: url, CertFile: cert, KeyFile: key, CAFile: pki.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	return s
}

// run runs s until the test ends.
func run(t *testing.T, s *flowagg.Sender) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFlows(t *testing.T, c *http.Client, url, query string, n int) {
	t.Helper()
	// 60 s: a big batch under -race on a shared machine.
	testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, func() string {
		if fl, _ := flowsOf(read(t, c, url, query)); len(fl) < n {
			return fmt.Sprintf("?%s: %d flows, want %d", query, len(fl), n)
		}
		return ""
	})
}

// TestPerNodeIdentitiesOnly: with no shared identity (--node-identities
// none) the nodes' shared certificate may send no node's flows, and a
// node's own certificate only its own.
func TestPerNodeIdentitiesOnly(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregatorWith(t, pki, "", func(c *flowagg.Config) { c.NodeIdentities = []string{} })
	shared, sharedKey := pki.IssueClient(t, "routed-node")
	own, ownKey := pki.IssueClient(t, "node-b")
	if code := post(t, client(t, pki, shared, sharedKey), a.url, batch("node-a", "y", 1, allowedFlow(8080))); code != http.StatusForbidden {
		t.Errorf("routed-node's certificate sending node-a's batch: %d, want 403", code)
	}
	if code := post(t, client(t, pki, own, ownKey), a.url, batch("node-a", "x", 1)); code != http.StatusForbidden {
		t.Errorf("node-b's certificate sending node-a's batch: %d, want 403", code)
	}
	if code := post(t, client(t, pki, own, ownKey), a.url, batch("node-b", "x", 1, deniedFlow(9090))); code != http.StatusNoContent {
		t.Errorf("node-b's own batch: %d, want 204", code)
	}
}
