package flowrec_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// checkPage opens the aggregator's page in Debian's headless Chromium,
// signs in with the token, filters to the denied flows of policy web
// and checks that the row names the deny rule (the lab's real traffic,
// TestFlowsEndToEnd). FLOWS_SCREENSHOT=FILE saves the page.
func checkPage(t *testing.T, url, token string) {
	t.Helper()
	bgptest.RequireCommands(t, map[string]string{"chromium": "chromium"})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath("chromium"), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), chromedp.WindowSize(1600, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel2 := chromedp.NewContext(actx)
	defer cancel2()
	ctx, cancel3 := context.WithTimeout(ctx, 60*time.Second)
	defer cancel3()
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.ID("flows"))); err != nil {
		t.Fatalf("the page: %v", err)
	}
	wait := func(what, expr string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Fatalf("the page: %s not within 10 s; it shows:\n%s", what, body)
			}
		}
	}
	wait("denied flows marked", `document.querySelectorAll("#flows tr.flow.denied").length >= 2`)
	if os.Getenv("FLOWS_SCREENSHOT") != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(os.Getenv("FLOWS_SCREENSHOT"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set := `(() => { const v = document.getElementById("f-verdict"); v.value = "deny"; v.dispatchEvent(new Event("input"));
		const p = document.getElementById("f-policy"); p.value = "web"; p.dispatchEvent(new Event("input")); return true })()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](set)); err != nil {
		t.Fatal(err)
	}
	wait("only the NetworkPolicy's denied flow after the filters", `(() => { const rows = document.querySelectorAll("#flows tr.flow");
		return rows.length >= 1 && [...rows].every((r) => r.classList.contains("denied") && r.querySelector("td.rule").textContent.includes("pi-np:prod/web/1")) })()`)
	rule, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#flows tr.denied td.rule")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rule, "ingress Deny np:prod/web rule 1") {
		t.Errorf("the denied row's rule: %q", rule)
	}
}
