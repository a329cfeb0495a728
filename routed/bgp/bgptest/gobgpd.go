package bgptest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// Gobgpd is a gobgpd daemon (Debian's, a GoBGP built apart from routed)
// running in a lab host.
type Gobgpd struct {
	host *Host
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// StartGobgpd runs gobgpd with a TOML config inside h, installing the
// gobgpd package if needed, and kills it (by its PID) when the test ends.
// Its gRPC API listens on 127.0.0.1:50051 inside h's namespace.
func StartGobgpd(t testing.TB, h *Host, tomlConfig string) *Gobgpd {
	t.Helper()
	RequireCommands(t, map[string]string{"gobgpd": "gobgpd", "gobgp": "gobgpd"})
	conf := filepath.Join(t.TempDir(), "gobgpd.toml")
	if err := os.WriteFile(conf, []byte(tomlConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Gobgpd{host: h, log: &bytes.Buffer{}}
	g.cmd = exec.Command("gobgpd", "-f", conf, "-t", "toml", "-l", "info", "-p",
		"--api-hosts", "127.0.0.1:50051", "--pprof-disable")
	g.cmd.Stdout, g.cmd.Stderr = g.log, g.log
	if err := h.Start(g.cmd); err != nil {
		t.Fatalf("start gobgpd: %v", err)
	}
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		_ = g.cmd.Wait()
		if t.Failed() {
			t.Logf("gobgpd output:\n%s", g.log.String())
		}
	})
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		out, err := g.CLI("global")
		if err == nil {
			return ""
		}
		return fmt.Sprintf("gobgpd did not come up: gobgp global: %v: %s", err, out)
	})
	return g
}

// CLI runs the gobgp client against this daemon, e.g. CLI("neighbor").
func (g *Gobgpd) CLI(args ...string) (string, error) {
	out, err := g.host.Command("gobgp", append([]string{"-u", "127.0.0.1", "-p", "50051"}, args...)...).CombinedOutput()
	return string(out), err
}
