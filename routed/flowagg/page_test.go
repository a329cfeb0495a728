package flowagg_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// browser starts Debian's headless Chromium (chromedp). It trusts any
// certificate: the aggregator's is the test's own CA's.
func browser(t *testing.T) context.Context {
	t.Helper()
	bgptest.RequireCommands(t, map[string]string{"chromium": "chromium"})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath("chromium"), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), chromedp.WindowSize(1600, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel3)
	return ctx
}

// waitJS polls a JavaScript expression until it is true.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: not within 10 s; the page shows:\n%s", what, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

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
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(a.url+"/"), chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		t.Fatal(err)
	}
	form, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(form, "flows") && strings.Contains(form, "<table") {
		t.Fatalf("the page shows flows before the token: %s", form)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("flows"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the allowed flow", `document.querySelectorAll("#flows tr.flow.allow").length == 1`)
	// Live: a denied flow sent now appears without a reload.
	if code := post(t, c, a.url, batch("node-a", "b1", 2, deniedFlow(9090))); code != http.StatusNoContent {
		t.Fatalf("batch: %d", code)
	}
	waitJS(t, ctx, "the denied flow, marked", `document.querySelectorAll("#flows tr.flow.denied").length == 1`)
	// Filter to denied flows.
	setVerdict(t, ctx, "deny")
	waitJS(t, ctx, "only denied flows after the filter", `document.querySelectorAll("#flows tr.flow").length == 1 && document.querySelectorAll("#flows tr.flow.denied").length == 1`)
	rule, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#flows tr.denied td.rule")))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#ns-matrix tbody")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rule, "np:prod/web") || !strings.Contains(rule, "Deny") || !strings.Contains(rule, "pi-np:prod/web/1") {
		t.Errorf("the denied row's rule is %q, want the NetworkPolicy's deny rule pi-np:prod/web/1", rule)
	}
	if !strings.Contains(ns, "prod\tprod\t0\t1") {
		t.Errorf("namespace view %q, want prod -> prod with 1 denied", ns)
	}
	// The allowed flow's trace names the staged policy that would deny it.
	setVerdict(t, ctx, "")
	waitJS(t, ctx, "both flows again", `document.querySelectorAll("#flows tr.flow").length == 2`)
	trace, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#flows tr.allow pre.trace")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(trace, "staged staged:sgnp:lockdown: would deny (changed)") || !strings.Contains(trace, "ingress Allow profile kns.prod") {
		t.Errorf("the allowed flow's trace: %q", trace)
	}
	if out := os.Getenv("FLOWS_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Println("screenshot:", out)
	}
}

// setVerdict picks the verdict filter as a user would (an input event).
func setVerdict(t *testing.T, ctx context.Context, v string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const s = document.getElementById("f-verdict"); s.value = %q; s.dispatchEvent(new Event("input")); return true })()`, v)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err != nil {
		t.Fatal(err)
	}
}
