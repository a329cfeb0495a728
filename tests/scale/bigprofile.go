package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/routed-net/routed/routed/status"
)

// -heap-profiles DIR: each real node's Go heap profile at the end of the
// idle window and right after the churn, read through routed's status
// socket as `routedctl node profile heap` reads it. One heap profile
// holds both views (go tool pprof -sample_index=inuse_space for what
// the heap holds at the last collection, alloc_space for what was
// allocated since the start); beside it the runtime's MemStats (heap in
// use, idle, released to the kernel, the next GC's goal), which say how
// much of the anonymous memory is live heap and how much is headroom.

// writeHeapProfiles writes, for every running real node, DIR/<node>-<when>.heap.pb.gz
// and DIR/<node>-<when>.memstats.txt.
func (b *bigRun) writeHeapProfiles(ctx context.Context, when string) error {
	dir := b.f.heapProfiles
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-heap-profiles: %w", err)
	}
	for _, n := range b.nodes {
		if !n.running() {
			continue
		}
		sock := filepath.Join(b.dir, n.name(), "routed.sock")
		base := filepath.Join(dir, n.name()+"-"+when)
		if err := writeProfile(ctx, sock, base+".heap.pb.gz"); err != nil {
			return fmt.Errorf("%s: heap profile: %w", n.name(), err)
		}
		if err := writeMemStats(ctx, sock, base+".memstats.txt"); err != nil {
			return fmt.Errorf("%s: memstats: %w", n.name(), err)
		}
	}
	fmt.Printf("==> heap profiles (%s) of the real nodes in %s (go tool pprof -top -sample_index=inuse_space|alloc_space FILE)\n", when, dir)
	return nil
}

func writeProfile(ctx context.Context, sock, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = status.NewClient(sock).Profile(ctx, "heap", f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeMemStats keeps the runtime.MemStats part of the text heap profile
// (debug=1), which ends the profile's text.
func writeMemStats(ctx context.Context, sock, path string) error {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routed"+status.PathProfile+"heap?debug=1", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("routed answered %s", resp.Status)
	}
	s := string(body)
	if i := strings.Index(s, "\n# runtime.MemStats"); i >= 0 {
		s = s[i+1:]
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
