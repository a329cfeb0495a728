package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/routed-net/routed/tests/lab"
)

// heapProfiles saves every node's Go heap profile (routedctl node
// profile heap) as dir/<node>-<tag>.pb.gz.
func heapProfiles(ctx context.Context, l *lab.Lab, dir, tag string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Printf("heap profiles: %v\n", err)
		return
	}
	for _, n := range l.Topo.Nodes {
		path := filepath.Join(dir, n.Name+"-"+tag+".pb.gz")
		if out, err := l.NodeCtl(ctx, n.Name, "node", "profile", "heap", "-o", path); err != nil {
			fmt.Printf("heap profile of %s (%s): %v\n%s", n.Name, tag, err, out)
		}
	}
}

// heapGrowth prints, for every node, where its heap in use grew between
// the two profiles (go tool pprof -top -diff_base).
func heapGrowth(dir, from, to string, nodes []lab.NodeSpec) string {
	var b strings.Builder
	for _, n := range nodes {
		base, last := filepath.Join(dir, n.Name+"-"+from+".pb.gz"), filepath.Join(dir, n.Name+"-"+to+".pb.gz")
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=12", "-sample_index=inuse_space", "-diff_base", base, last).CombinedOutput()
		fmt.Fprintf(&b, "==> %s: heap in use, %s -> %s (go tool pprof -top -diff_base %s %s)\n", n.Name, from, to, base, last)
		if err != nil {
			fmt.Fprintf(&b, "pprof: %v\n", err)
		}
		b.Write(out)
	}
	return b.String()
}
