package cniserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/routed-net/routed/pkg/cniapi"
)

// TestListenRootOnly: the socket is created 0600 in a directory only
// routed's user may write; a directory others may write to is refused.
func TestListenRootOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "cni.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v, mode %v; want a 0600 socket", path, err, fi.Mode())
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(filepath.Join(open, "cni.sock")); err == nil {
		l.Close()
		t.Fatal("listening in a world-writable directory was accepted")
	}
}

// TestFallbackReplies: a request for another node's name asks the
// plugin to do the work itself; a malformed request is a CNI error with
// code 7.
func TestFallbackReplies(t *testing.T) {
	s := New(Config{Node: "n1"})
	for _, tc := range []struct {
		body     any
		fallback bool
		code     uint
	}{
		{cniapi.Request{Node: "n2", Stdin: []byte(`{"ipam":{"type":"routed-ipam"}}`)}, true, 0},
		{"not a request", false, 7},
	} {
		b, _ := json.Marshal(tc.body)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, cniapi.PathAdd, bytes.NewReader(b)))
		var e cniapi.ErrorReply
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code == http.StatusOK {
			t.Fatalf("%v: %d %s", tc.body, rec.Code, rec.Body)
		}
		if e.Fallback != tc.fallback || e.Code != tc.code {
			t.Fatalf("%v: reply %+v, want fallback %v code %d", tc.body, e, tc.fallback, tc.code)
		}
	}
}
