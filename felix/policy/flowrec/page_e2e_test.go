package flowrec_test

import (
	"os"
	"strings"
	"testing"

	"github.com/routed-net/routed/internal/flowpagetest"
)

// checkPage opens the aggregator's page in Debian's headless Chromium,
// signs in with the token, filters to the denied flows of policy web
// and checks that the row names the deny rule (the lab's real traffic,
// TestFlowsEndToEnd). FLOWS_SCREENSHOT=FILE saves the page.
func checkPage(t *testing.T, url, token string) {
	t.Helper()
	page := flowpagetest.Open(t, url, token)
	page.Wait("denied flows marked", `document.querySelectorAll("#flows tr.flow.denied").length >= 2`)
	if out := os.Getenv("FLOWS_SCREENSHOT"); out != "" {
		page.Screenshot(out)
	}
	page.SetFilter("f-verdict", "deny")
	page.SetFilter("f-policy", "web")
	page.Wait("only the NetworkPolicy's denied flow after the filters", `(() => { const rows = document.querySelectorAll("#flows tr.flow");
		return rows.length >= 1 && [...rows].every((r) => r.classList.contains("denied") && r.querySelector("td.rule").textContent.includes("pi-np:prod/web/1")) })()`)
	if rule := page.Text("#flows tr.denied td.rule"); !strings.Contains(rule, "ingress Deny np:prod/web rule 1") {
		t.Errorf("the denied row's rule: %q", rule)
	}
}
