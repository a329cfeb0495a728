package flowagg_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/routed-net/routed/internal/testpki"
)

// TestPageHeaders: the sign-in form and the page forbid framing,
// sniffing and referrers, and allow no inline code but their own (by
// hash, no 'unsafe-inline'); the browser test (TestPageInBrowser)
// proves the page's script still runs under it.
func TestPageHeaders(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	c := client(t, pki, "", "")
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	ck := signIn(t, c, a.url)
	for name, cookie := range map[string]*http.Cookie{"sign-in form": nil, "page": ck} {
		req, _ := http.NewRequest("GET", a.url+"/", nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		for k, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if h.Get(k) != want {
				t.Errorf("%s: %s %q, want %q", name, k, h.Get(k), want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "style-src 'sha256-") {
			t.Errorf("%s: Content-Security-Policy %q", name, csp)
		}
		if cookie != nil && !strings.Contains(csp, "script-src 'sha256-") {
			t.Errorf("the page's script is not allowed by hash: %q", csp)
		}
	}
}
