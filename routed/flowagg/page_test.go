package flowagg_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/internal/flowpagetest"
	"github.com/routed-net/routed/internal/testpki"
)

// TestPageInBrowser: the aggregator's page in headless Chromium asks
// for the token, then shows the flows live (one sent after it loaded
// appears), marks the denied one, filters to denied flows, names the
// deny rule in the row and the staged verdict in the trace, and counts
// namespace to namespace.
func TestPageInBrowser(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	cert, key := pki.IssueClient(t, "routed-node")
	c := client(t, pki, cert, key)
	allowed := allowedFlow(8080)
	allowed.Staged = []policy.StagedVerdict{{Policy: "staged:sgnp:lockdown", Allowed: false, Changed: true,
		Ingress: &policy.Decision{Direction: "ingress", Rule: policy.RuleInfo{Kind: policy.KindStagedPolicyRule, Tier: "default", Policy: "staged:sgnp:lockdown", Direction: "ingress", Action: "Deny"}}}}
	if code := post(t, c, a.url, batch("node-a", "b1", 1, allowed)); code != http.StatusNoContent {
		t.Fatalf("batch: %d", code)
	}
	page := flowpagetest.Open(t, a.url, testToken)
	page.Wait("the allowed flow", `document.querySelectorAll("#flows tr.flow.allow").length == 1`)
	// Live: a denied flow sent now appears without a reload.
	if code := post(t, c, a.url, batch("node-a", "b1", 2, deniedFlow(9090))); code != http.StatusNoContent {
		t.Fatalf("batch: %d", code)
	}
	page.Wait("the denied flow, marked", `document.querySelectorAll("#flows tr.flow.denied").length == 1`)
	// Filter to denied flows.
	page.SetFilter("f-verdict", "deny")
	page.Wait("only denied flows after the filter", `document.querySelectorAll("#flows tr.flow").length == 1 && document.querySelectorAll("#flows tr.flow.denied").length == 1`)
	rule := page.Text("#flows tr.denied td.rule")
	ns := page.Text("#ns-matrix tbody")
	if !strings.Contains(rule, "np:prod/web") || !strings.Contains(rule, "Deny") || !strings.Contains(rule, "pi-np:prod/web/1") {
		t.Errorf("the denied row's rule is %q, want the NetworkPolicy's deny rule pi-np:prod/web/1", rule)
	}
	if !strings.Contains(ns, "prod\tprod\t0\t1") {
		t.Errorf("namespace view %q, want prod -> prod with 1 denied", ns)
	}
	// The allowed flow's trace names the staged policy that would deny it.
	page.SetFilter("f-verdict", "")
	page.Wait("both flows again", `document.querySelectorAll("#flows tr.flow").length == 2`)
	trace := page.TextContent("#flows tr.allow pre.trace")
	if !strings.Contains(trace, "staged staged:sgnp:lockdown: would deny (changed)") || !strings.Contains(trace, "ingress Allow profile kns.prod") {
		t.Errorf("the allowed flow's trace: %q", trace)
	}
	if out := os.Getenv("FLOWS_SCREENSHOT"); out != "" {
		page.Screenshot(out)
		fmt.Println("screenshot:", out)
	}
}
