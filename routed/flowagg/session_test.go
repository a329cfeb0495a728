package flowagg_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/routed-net/routed/internal/testpki"
)

// signIn posts the token to /login and returns the answer's cookie.
func signIn(t *testing.T, c *http.Client, base string) *http.Cookie {
	t.Helper()
	resp, err := c.Post(base+"/login", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %s with %d cookies", resp.Status, len(resp.Cookies()))
	}
	return resp.Cookies()[0]
}

// getWithCookie is GET path with cookie c.
func getWithCookie(t *testing.T, cl *http.Client, base, path string, c *http.Cookie) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.AddCookie(c)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSessionCookieNotToken: signing in sets a __Host- session cookie
// (Secure, HttpOnly, SameSite=Strict, Path=/, expiring) that is not the
// token; it reads the flows until /logout ends it; a made-up session
// or the token itself in the cookie reads nothing.
func TestSessionCookieNotToken(t *testing.T) {
	pki := testpki.New(t)
	a := startAggregator(t, pki, "")
	c := client(t, pki, "", "")
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	ck := signIn(t, c, a.url)
	switch {
	case ck.Name != "__Host-routed-flows-session" || !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Domain != "":
		t.Errorf("session cookie %+v: want __Host-, Secure, HttpOnly, SameSite=Strict, Path=/ and no Domain", ck)
	case ck.MaxAge <= 0:
		t.Errorf("session cookie without Max-Age: %+v", ck)
	case strings.Contains(ck.Value, testToken) || len(ck.Value) < 32:
		t.Errorf("session cookie value %q is the token or too short to be random", ck.Value)
	}
	if code := getWithCookie(t, c, a.url, "/v1/flows", ck); code != http.StatusOK {
		t.Errorf("the session reading flows: %d", code)
	}
	for _, forged := range []string{testToken, ck.Value + "x", "AAAA"} {
		if code := getWithCookie(t, c, a.url, "/v1/flows", &http.Cookie{Name: ck.Name, Value: forged}); code != http.StatusUnauthorized {
			t.Errorf("cookie %q: %d, want 401", forged, code)
		}
	}
	other := signIn(t, c, a.url)
	req, _ := http.NewRequest("POST", a.url+"/logout", nil)
	req.AddCookie(ck)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cl := resp.Cookies(); len(cl) != 1 || cl[0].MaxAge >= 0 {
		t.Errorf("logout did not clear the cookie: %+v", cl)
	}
	if code := getWithCookie(t, c, a.url, "/v1/flows", ck); code != http.StatusUnauthorized {
		t.Errorf("the session after logout: %d, want 401", code)
	}
	if code := getWithCookie(t, c, a.url, "/v1/flows", other); code != http.StatusOK {
		t.Errorf("another session after this one's logout: %d, want 200", code)
	}
}
