package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/flowaggtest"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestFlowsCommand: routedctl flows reads a real aggregator over TLS
// with the token, filters, prints a table naming the deny rule and the
// gaps, and JSON lines with -o json; bad flags are refused by name.
func TestFlowsCommand(t *testing.T) {
	srv := flowaggtest.Start(t, "a-reader-token-of-some-length")
	now := time.Now()
	deny := flowrec.Flow{End: now, Src: flowrec.End{Addr: "10.65.0.1", Kind: flowrec.EndPod, Namespace: "prod", Name: "a"},
		Dst: flowrec.End{Addr: "10.65.0.2", Kind: flowrec.EndPod, Namespace: "prod", Name: "b"}, Proto: "TCP", DstPort: 9090, Verdict: flowrec.Deny, Denied: 2,
		Ingress: &flowrec.Trace{Verdict: flowrec.Deny, Steps: []policy.RuleInfo{{ID: "pi-np:prod/web/1", Kind: policy.KindPolicyRule, Tier: "default", Policy: "np:prod/web", Direction: "ingress", Index: 1, Action: "Deny"}}}}
	allow := deny
	allow.DstPort, allow.Verdict, allow.Denied, allow.Started = 8080, flowrec.Allow, 0, 1
	allow.Ingress = &flowrec.Trace{Verdict: flowrec.Allow}
	srv.Window().Add(flowrec.Batch{Node: "node-a", Boot: "b", Seq: 1, Start: now.Add(-time.Second), End: now, Flows: []flowrec.Flow{deny, allow}})
	srv.Window().Add(flowrec.Batch{Node: "node-a", Boot: "c", Seq: 1, Start: now, End: now})

	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		cmd := New(&out, &errOut)
		cmd.SetArgs(append(append([]string{"flows"}, srv.CtlArgs()...), args...))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("--verdict", "deny")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "prod/a") || !strings.Contains(out, "ingress default/np:prod/web[1] Deny") || strings.Contains(out, "TCP/8080") ||
		!strings.Contains(out, "GAP: node-restarted") || !strings.Contains(out, "GAP: aggregator-started") {
		t.Errorf("routedctl flows --verdict deny:\n%s", out)
	}
	out, err = run("-o", "json", "--port", "8080")
	if err != nil {
		t.Fatal(err)
	}
	var flows int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e flowagg.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("-o json line %q: %v", line, err)
		}
		if e.Flow != nil {
			flows++
			if e.Flow.DstPort != 8080 {
				t.Errorf("--port 8080 printed %+v", e.Flow)
			}
		}
	}
	if flows != 1 {
		t.Errorf("-o json --port 8080: %d flows:\n%s", flows, out)
	}
	for _, bad := range [][]string{{"--verdict", "maybe"}, {"--since", "yesterday"}, {"-o", "yaml"}, {"--port", "70000"}} {
		if _, err := run(bad...); err == nil || !strings.Contains(err.Error(), strings.TrimLeft(bad[0], "-")) {
			t.Errorf("%v: %v, want an error naming %s", bad, err, bad[0])
		}
	}
	var outB, errB bytes.Buffer
	cmd := New(&outB, &errB)
	cmd.SetArgs([]string{"flows", "--server", srv.URL, "--ca-file", srv.PKI.CAFile, "--token-file", ""})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("without a token: %v", err)
	}
}
