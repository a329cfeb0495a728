package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReferenceIsCurrent regenerates the routedctl reference and
// compares it with docs/routedctl, page by page: a command, flag or help
// text changed without `make docs` fails here.
func TestReferenceIsCurrent(t *testing.T) {
	committed := filepath.Join("..", "..", "..", "docs", "routedctl")
	fresh := t.TempDir()
	// tree() unsets ETCD_* and ROUTED_*; t.Setenv puts them back after.
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range envPrefixes {
			if strings.HasPrefix(k, p) {
				t.Setenv(k, v)
			}
		}
	}
	if err := generate(fresh); err != nil {
		t.Fatal(err)
	}
	want := pages(t, fresh)
	have := pages(t, committed)
	for name, text := range want {
		got, ok := have[name]
		switch {
		case !ok:
			t.Errorf("docs/routedctl/%s is missing: run `make docs`", name)
		case got != text:
			t.Errorf("docs/routedctl/%s is stale: run `make docs`", name)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/routedctl/%s documents a command that no longer exists: run `make docs`", name)
		}
	}
	if len(want) < 10 {
		t.Errorf("only %d pages generated; the command tree looks wrong", len(want))
	}
}

// pages reads every Markdown page of dir.
func pages(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(b)
	}
	return out
}
