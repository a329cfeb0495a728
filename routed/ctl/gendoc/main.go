// Command gendoc writes routedctl's command reference, one Markdown page
// per command, from the cobra command tree itself (cobra's doc
// generator), so the reference cannot drift from the flags and help
// text. `make docs` runs it; TestReferenceIsCurrent fails when
// docs/routedctl is stale.
//
//	go run ./routed/ctl/gendoc -out docs/routedctl
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/routed-net/routed/routed/ctl"
)

func main() {
	out := flag.String("out", "docs/routedctl", "directory the reference is written to (its *.md files are replaced)")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

// envPrefixes name the environment variables that flag defaults are read
// from (ETCD_ENDPOINTS, ROUTED_STATUS_SOCKET...). They are cleared before
// the tree is built so that the reference shows the built-in defaults
// and not the environment of whoever ran the generator.
var envPrefixes = []string{"ETCD_", "ROUTED_", "CALICO_"}

// clearEnv unsets the variables of envPrefixes in this process.
func clearEnv() {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		for _, p := range envPrefixes {
			if strings.HasPrefix(k, p) {
				os.Unsetenv(k)
			}
		}
	}
}

// tree builds routedctl's commands the way the binary does, without the
// "Auto generated ... on <date>" footer, so that the output changes only
// when a command does.
func tree() *cobra.Command {
	clearEnv()
	root := ctl.New(io.Discard, io.Discard)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// generate writes the reference into dir, which must exist.
func generate(dir string) error {
	if err := doc.GenMarkdownTree(tree(), dir); err != nil {
		return fmt.Errorf("generating the routedctl reference into %s: %w", dir, err)
	}
	return nil
}

// write regenerates dir: pages of commands that no longer exist go.
func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("removing the stale page %s: %w", f, err)
		}
	}
	return generate(dir)
}
