package bgptest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// FRR is FRRouting's bgpd (Debian's frr package) running alone, without
// zebra, in a lab host: its sockets and files live in a directory of
// the test's own.
type FRR struct {
	host *Host
	dir  string
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// StartFRR runs bgpd with config (frr.conf syntax) inside h, installing
// the frr package if needed, and kills it (by its PID) when the test
// ends. FRR 8 enforces, by default, that an eBGP route's AS path starts
// with its neighbor's AS.
func StartFRR(t testing.TB, h *Host, config string) *FRR {
	t.Helper()
	RequireCommands(t, map[string]string{"vtysh": "frr"})
	// Not t.TempDir: its parent is closed to the frr user.
	dir, err := os.MkdirTemp("", "routed-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	conf := filepath.Join(dir, "bgpd.conf")
	// bgpd drops to the frr user (root is not in the frrvty group it
	// wants): it must read the config and write its sockets here.
	if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	f := &FRR{host: h, dir: dir, log: &bytes.Buffer{}}
	f.cmd = exec.Command("/usr/lib/frr/bgpd", "-f", conf, "-i", filepath.Join(dir, "bgpd.pid"),
		"--vty_socket", dir, "-z", filepath.Join(dir, "zserv.api"), "-P", "0", "-Z", "-u", "frr", "-g", "frr", "--log", "stdout")
	f.cmd.Stdout, f.cmd.Stderr = f.log, f.log
	if err := h.Start(f.cmd); err != nil {
		t.Fatalf("start bgpd: %v", err)
	}
	t.Cleanup(func() {
		_ = f.cmd.Process.Kill()
		_ = f.cmd.Wait()
		if t.Failed() {
			t.Logf("bgpd output:\n%s", f.log.String())
		}
	})
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		out, err := f.Vtysh("show bgp summary")
		if err == nil && !strings.Contains(out, "failed") {
			return ""
		}
		return fmt.Sprintf("bgpd did not come up: vtysh show bgp summary: %v: %s", err, out)
	})
	return f
}

// Vtysh runs one vtysh command against this bgpd.
func (f *FRR) Vtysh(command string) (string, error) {
	out, err := f.host.Command("vtysh", "--vty_socket", f.dir, "-d", "bgpd", "-c", command).CombinedOutput()
	return string(out), err
}

// WaitVtysh runs command until match accepts its output or timeout
// passes (then the test fails with the last output).
func (f *FRR) WaitVtysh(t testing.TB, command string, timeout time.Duration, match func(string) bool) string {
	t.Helper()
	var out string
	testenv.Eventually(t, timeout, 200*time.Millisecond, func() string {
		out, _ = f.Vtysh(command)
		if match(out) {
			return ""
		}
		return fmt.Sprintf("vtysh %s never matched; last output:\n%s", command, out)
	})
	return out
}
