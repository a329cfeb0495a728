// Package flowpagetest drives the flow aggregator's page (routed/flowagg,
// docs/flows.md) in Debian's headless Chromium for tests, as a reader
// would: the sign-in form, the token, the live table and its filters.
// It is for tests only; it fails the test it is given.
package flowpagetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// WaitLimit is how long Wait waits for the page to show something: the
// issue's bound on a flow reaching a reader.
const WaitLimit = 10 * time.Second

// Page is the aggregator's page, signed in, in a headless Chromium the
// test's cleanup stops.
type Page struct {
	t   testing.TB
	ctx context.Context
}

// Open starts Chromium (it trusts any certificate: the aggregator's is
// the test's own CA's), loads url's page, checks that it shows only the
// sign-in form before the token, signs in with token and waits for the
// flows table.
func Open(t testing.TB, url, token string) *Page {
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
	p := &Page{t: t, ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.Navigate(strings.TrimSuffix(url, "/")+"/"), chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		t.Fatalf("the page at %s: the sign-in form: %v", url, err)
	}
	form, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
	if err != nil {
		t.Fatalf("the page at %s: %v", url, err)
	}
	if strings.Contains(form, "<table") {
		t.Fatalf("the page shows a table before the token:\n%s", form)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("flows"))); err != nil {
		t.Fatalf("the page at %s: signing in: %v", url, err)
	}
	return p
}

// Wait polls the JavaScript expression expr until it is true, for at
// most WaitLimit, and fails the test with what the page shows if it
// never is.
func (p *Page) Wait(what, expr string) time.Duration {
	p.t.Helper()
	start := time.Now()
	testenv.Eventually(p.t, WaitLimit, 100*time.Millisecond, func() string {
		ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			p.t.Fatalf("the page: %s: %v", what, err)
		}
		if ok {
			return ""
		}
		// Read on every miss, so that the failure shows the page as
		// it was at the last poll.
		body, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		return fmt.Sprintf("the page: %s: not yet; it shows:\n%s", what, body)
	})
	return time.Since(start)
}

// SetFilter types value into the filter input or select of that id
// (f-verdict, f-policy, f-namespace, f-pod, f-port), with the input
// event a user's typing sends.
func (p *Page) SetFilter(id, value string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.getElementById(%q); if (!e) return false; e.value = %q; e.dispatchEvent(new Event("input")); return true })()`, id, value)
	ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](js))
	if err != nil || !ok {
		p.t.Fatalf("the page: filter %s=%q: no such input (%v)", id, value, err)
	}
}

// Text is the visible text of the first element css selects.
func (p *Page) Text(css string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		p.t.Fatalf("the page: text of %s: %v", css, err)
	}
	return s
}

// Screenshot writes the whole page as a PNG to path.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("the page: screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// TextContent is the text of the first element css selects, shown or
// not (a flow's trace is folded until clicked).
func (p *Page) TextContent(css string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.TextContent(chromedp.CSS(css)))
	if err != nil {
		p.t.Fatalf("the page: text content of %s: %v", css, err)
	}
	return s
}

// SignOut presses the page's Sign out button and waits for the
// sign-in form.
func (p *Page) SignOut() {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		p.t.Fatalf("signing out: %v", err)
	}
}

// Navigate loads url in the page's tab.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, chromedp.Navigate(url)); err != nil {
		p.t.Fatalf("loading %s: %v", url, err)
	}
}
