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
)

// Bird is a BIRD 2 daemon running in a lab host.
type Bird struct {
	// Sock is the control socket for birdc.
	Sock string
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// StartBird runs "bird -f" with config inside h, installing bird2 if
// needed, and stops it (by its PID) when the test ends.
func StartBird(t testing.TB, h *Host, config string) *Bird {
	t.Helper()
	EnsurePackages(t, map[string]string{"bird": "bird2", "birdc": "bird2"})
	dir := t.TempDir()
	conf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &Bird{Sock: filepath.Join(dir, "bird.ctl"), log: &bytes.Buffer{}}
	b.cmd = exec.Command("bird", "-f", "-c", conf, "-s", b.Sock, "-P", filepath.Join(dir, "bird.pid"))
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := h.Start(b.cmd); err != nil {
		t.Fatalf("start bird: %v", err)
	}
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
		if t.Failed() {
			t.Logf("bird output:\n%s", b.log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.Ctl("show status"); err == nil {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("bird did not come up:\n%s", b.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ctl runs a birdc command and returns its output.
func (b *Bird) Ctl(command string) (string, error) {
	out, err := exec.Command("birdc", append([]string{"-s", b.Sock}, strings.Fields(command)...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s: %w: %s", command, err, out)
	}
	return string(out), nil
}

// WaitCtl polls a birdc command until match accepts its output.
func (b *Bird) WaitCtl(t testing.TB, command string, timeout time.Duration, match func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out string
	for time.Now().Before(deadline) {
		out, _ = b.Ctl(command)
		if match(out) {
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("birdc %s never matched; last output:\n%s", command, out)
	return out
}
