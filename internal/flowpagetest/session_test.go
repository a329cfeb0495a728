package flowpagetest

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/flowaggtest"
)

const readerToken = "reader-token-0123456789"

// TestBrowserNeverHoldsToken: after signing in with the real browser,
// another app on 127.0.0.1 (another port-forward, say) that the browser
// visits never receives the reader token (cookies are not port-scoped:
// it may see at most the expiring session); signing out returns to the
// sign-in form and the page's session reads nothing more.
func TestBrowserNeverHoldsToken(t *testing.T) {
	a := flowaggtest.Start(t, readerToken)
	p := Open(t, a.URL, a.Token)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 8)
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Cookie")
		fmt.Fprint(w, "other app")
	})}
	go func() { _ = other.Serve(ln) }()
	t.Cleanup(func() { other.Close() })
	p.Navigate("http://" + ln.Addr().String() + "/")
	select {
	case ck := <-seen:
		if strings.Contains(ck, readerToken) {
			t.Errorf("another app on 127.0.0.1 received the reader token: Cookie %q", ck)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the browser never reached the other app")
	}
	p.Navigate(a.URL + "/")
	p.Wait("the page, still signed in", `document.getElementById("signout") !== null`)
	p.SignOut()
	p.Navigate(a.URL + "/")
	p.Wait("the sign-in form after signing out", `document.getElementById("token") !== null && document.getElementById("flows") === null`)
}
