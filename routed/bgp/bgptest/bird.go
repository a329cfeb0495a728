package bgptest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// Bird is a BIRD 2 daemon running in a lab host.
type Bird struct {
	// Sock is the control socket for birdc.
	Sock string
	cmd  *exec.Cmd
	log  *LockedBuffer
}

// StartBird runs "bird -f" with config inside h, installing bird2 if
// needed, and stops it (by its PID) when the test ends. BIRD logs its
// protocols' states and events to the output shown when a test fails,
// and each BGP protocol retries quickly (labConfig).
func StartBird(t testing.TB, h *Host, config string) *Bird {
	t.Helper()
	RequireCommands(t, map[string]string{"bird": "bird2", "birdc": "bird2"})
	dir := t.TempDir()
	conf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(labConfig(config)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &Bird{Sock: filepath.Join(dir, "bird.ctl"), log: &LockedBuffer{}}
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
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		_, err := b.Ctl("show status")
		if err == nil {
			return ""
		}
		return fmt.Sprintf("bird did not come up: %v", err)
	})
	return b
}

// birdLab is what labConfig adds at the top of a test's BIRD config.
const birdLab = "log stderr all;\ndebug protocols { states, events };\n"

// birdQuickRetry is what labConfig adds to each BGP protocol. BIRD's
// defaults suit a real network, not a test: a first connection refused
// (the routed peer not configured yet on a loaded machine) puts the
// protocol in error wait for 60 s, refusing routed's connections too, so
// a session a test waits 30 s for might never come up.
const birdQuickRetry = "\n\tconnect delay time 1; connect retry time 2; error wait time 1,3; error forget time 10;"

var bgpProtocol = regexp.MustCompile(`(?m)^(\s*protocol\s+bgp\b[^{]*\{)`)

// labConfig is config with logging to stderr and quick BGP retries,
// each unless the test's config sets its own.
func labConfig(config string) string {
	if !strings.Contains(config, "connect retry time") && !strings.Contains(config, "error wait time") {
		config = bgpProtocol.ReplaceAllString(config, "${1}"+birdQuickRetry)
	}
	if !strings.Contains(config, "\nlog ") && !strings.HasPrefix(config, "log ") {
		config = birdLab + config
	}
	return config
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
	var out string
	testenv.Eventually(t, timeout, 200*time.Millisecond, func() string {
		out, _ = b.Ctl(command)
		if match(out) {
			return ""
		}
		// Asked on every miss, so that the failure shows the protocols
		// as they were at the last poll.
		protocols, _ := b.Ctl("show protocols all")
		return fmt.Sprintf("birdc %s never matched; last output:\n%s\nbirdc show protocols all:\n%s", command, out, protocols)
	})
	return out
}

// Log returns BIRD's output so far: with the lab's logging, its
// protocols' state changes and events.
func (b *Bird) Log() string { return b.log.String() }

// LockedBuffer holds a process's output, written by exec's copier while
// the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *LockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
