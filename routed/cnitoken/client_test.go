package cnitoken

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI is an HTTPS server standing in for the API server, and a
// Client of it authenticating with a token file.
type fakeAPI struct {
	srv       *httptest.Server
	tokenFile string
	client    *Client
}

func newFakeAPI(t *testing.T, h http.HandlerFunc) *fakeAPI {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	f := &fakeAPI{srv: srv, tokenFile: filepath.Join(t.TempDir(), "token")}
	f.rotate(t, "node-token-1")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := NewClient(ClientConfig{Server: srv.URL, CAData: ca, TokenFile: f.tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	f.client = c
	return f
}

// rotate replaces routed's own token, as kubelet does with a projected
// one.
func (f *fakeAPI) rotate(t *testing.T, tok string) {
	t.Helper()
	if err := os.WriteFile(f.tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// testCA is the PEM of a test server's certificate.
func testCA(t *testing.T) []byte {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func (f *fakeAPI) config(t *testing.T) Config {
	t.Helper()
	c := Config{Client: f.client, Namespace: "kube-system", ServiceAccount: DefaultServiceAccount,
		Path: "/unused", Server: f.srv.URL, Validity: 10 * time.Minute, RefreshBefore: 5 * time.Minute}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRequest: a TokenRequest for the plugin's account with the asked
// lifetime, authenticated with routed's token as the file holds it now.
func TestRequest(t *testing.T) {
	exp := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	var mu sync.Mutex
	var auths []string
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			APIVersion, Kind string
			Spec             struct {
				ExpirationSeconds int64 `json:"expirationSeconds"`
			}
		}
		err := json.NewDecoder(r.Body).Decode(&body)
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/kube-system/serviceaccounts/routed-cni-plugin/token" ||
			err != nil || body.Kind != "TokenRequest" || body.APIVersion != "authentication.k8s.io/v1" || body.Spec.ExpirationSeconds != 600 ||
			r.Header.Get("Content-Type") != "application/json" || r.Header.Get("User-Agent") != "routed-node" {
			t.Errorf("unexpected request %s %s %+v (%v) %v", r.Method, r.URL, body, err, r.Header)
		}
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"kind":"TokenRequest","status":{"token":"plugin-token","expirationTimestamp":%q}}`, exp.Format(time.RFC3339))
	})
	c := f.config(t)
	for _, own := range []string{"node-token-1", "node-token-2"} {
		f.rotate(t, own)
		tok, err := c.Request(context.Background())
		if err != nil || tok.Value != "plugin-token" || !tok.Expires.Equal(exp) {
			t.Fatalf("Request: %+v %v", tok, err)
		}
	}
	if len(auths) != 2 || auths[0] != "Bearer node-token-1" || auths[1] != "Bearer node-token-2" {
		t.Errorf("authorization headers %q, want the token file as it was at each request", auths)
	}
}

// TestRequestErrors: each refusal says what to fix, and is ErrRequest.
func TestRequestErrors(t *testing.T) {
	for _, c := range []struct {
		code      int
		body      string
		wantInErr string
	}{
		{http.StatusForbidden, `{"kind":"Status","message":"serviceaccounts \"routed-cni-plugin\" is forbidden"}`, "Role routed-node-cni-token"},
		{http.StatusNotFound, `{"kind":"Status","message":"serviceaccounts \"routed-cni-plugin\" not found"}`, "does not exist"},
		{http.StatusInternalServerError, `oops`, "500 Internal Server Error: oops"},
		{http.StatusCreated, `{"status":{}}`, "without a token or expiry"},
		{http.StatusCreated, `not json`, "not a TokenRequest"},
	} {
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.code)
			fmt.Fprint(w, c.body)
		})
		cfg := f.config(t)
		_, err := cfg.Request(context.Background())
		if !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), c.wantInErr) {
			t.Errorf("answer %d %s: %v, want ErrRequest saying %q", c.code, c.body, err, c.wantInErr)
		}
		if c.code == http.StatusForbidden && !strings.Contains(err.Error(), "is forbidden") {
			t.Errorf("403: %v, want the API server's message", err)
		}
	}
}

func TestDaemonSetGone(t *testing.T) {
	for _, c := range []struct {
		code       int
		body       string
		gone, fail bool
	}{
		{http.StatusOK, `{"metadata":{"name":"routed"}}`, false, false},
		{http.StatusOK, `{"metadata":{"name":"routed","deletionTimestamp":"2026-01-01T00:00:00Z"}}`, true, false},
		{http.StatusNotFound, `{"kind":"Status","reason":"NotFound"}`, true, false},
		{http.StatusForbidden, `{"kind":"Status","message":"no"}`, false, true},
	} {
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/apis/apps/v1/namespaces/kube-system/daemonsets/routed" {
				t.Errorf("unexpected request %s %s", r.Method, r.URL)
			}
			w.WriteHeader(c.code)
			fmt.Fprint(w, c.body)
		})
		cfg := f.config(t)
		gone, err := cfg.DaemonSetGone(context.Background(), "kube-system", "routed")
		if gone != c.gone || (err != nil) != c.fail {
			t.Errorf("answer %d %s: gone %v, err %v", c.code, c.body, gone, err)
		}
	}
}

// TestWatchDaemonSet: the watch asks for the one DaemonSet by name, and
// its deletion is reported; the events before it are not.
func TestWatchDaemonSet(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/apis/apps/v1/namespaces/kube-system/daemonsets" || q.Get("watch") != "true" || q.Get("fieldSelector") != "metadata.name=routed" {
			t.Errorf("unexpected watch %s", r.URL)
		}
		fmt.Fprintln(w, `{"type":"ADDED","object":{"metadata":{"name":"routed"}}}`)
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		fmt.Fprintln(w, `{"type":"DELETED","object":{"metadata":{"name":"routed"}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	cfg := f.config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deleted := 0
	cfg.WatchDaemonSet(ctx, "kube-system", "routed", func() { deleted++; cancel() })
	if deleted != 1 {
		t.Errorf("deletion reported %d times, want 1", deleted)
	}
}

func TestNewClientRejects(t *testing.T) {
	ca := testCA(t)
	for name, cc := range map[string]ClientConfig{
		"http server":    {Server: "http://127.0.0.1:6443", CAData: ca, Token: "t"},
		"no server":      {CAData: ca, Token: "t"},
		"no CA":          {Server: "https://127.0.0.1:6443", Token: "t"},
		"not a PEM":      {Server: "https://127.0.0.1:6443", CAData: []byte("x"), Token: "t"},
		"no credentials": {Server: "https://127.0.0.1:6443", CAData: ca},
	} {
		if _, err := NewClient(cc); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}
