package ctl

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/flowaggtest"
)

// TestFlowsPrintEscapesControls: names in flows come from the nodes'
// datastore; routedctl prints a terminal escape or a tab in them as an
// escape, never raw.
func TestFlowsPrintEscapesControls(t *testing.T) {
	srv := flowaggtest.Start(t, "a-reader-token-of-some-length")
	now := time.Now()
	f := flowrec.Flow{End: now, Src: flowrec.End{Addr: "10.65.0.1", Kind: flowrec.EndPod, Namespace: "prod", Name: "a\x1b[2J\x1b]0;pwned\x07"},
		Dst: flowrec.End{Addr: "10.65.0.2", Kind: flowrec.EndPod, Namespace: "prod", Name: "b\tc"}, Proto: "TCP", DstPort: 80, Verdict: flowrec.Allow, Started: 1}
	if err := srv.Window().Add(flowrec.Batch{Node: "node-a", Boot: "b", Seq: 1, Start: now.Add(-time.Second), End: now, Flows: []flowrec.Flow{f}}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := New(&out, &errOut)
	cmd.SetArgs(append([]string{"flows"}, srv.CtlArgs()...))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") || !strings.Contains(out.String(), `a\x1b[2J`) || !strings.Contains(out.String(), `prod/b\tc`) {
		t.Errorf("control characters printed raw or lost:\n%q", out.String())
	}
}

// TestFlowsRefusesPlainHTTP: --server http://... is refused before
// anything is sent: the token would travel in clear.
func TestFlowsRefusesPlainHTTP(t *testing.T) {
	var asked atomic.Bool
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { asked.Store(true) }))
	defer plain.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("a-reader-token-of-some-length"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := New(&out, &errOut)
	cmd.SetArgs([]string{"flows", "--server", plain.URL, "--token-file", tok})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "https") || !strings.Contains(err.Error(), "clear") {
		t.Errorf("--server %s: %v, want an error saying the token would travel in clear", plain.URL, err)
	}
	if asked.Load() {
		t.Errorf("the plain-HTTP server was sent a request")
	}
}
